/* Allocation sites through dladdr: cheap enough to take on every allocation that is kept for
 * a report, and readable without symbol files. */
#include <dlfcn.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "site.h"

void gc_site_of(void *return_address, char *buf, size_t cap) {
  if (!buf || cap == 0) return;
  uintptr_t pc = (uintptr_t)return_address;
  Dl_info info;
  memset(&info, 0, sizeof info);
  /* pc - 1 is inside the call instruction: a call that ends its function returns to the next
   * symbol, which would name the wrong caller. The printed offset stays that of pc. */
  if (pc == 0 || !dladdr((void *)(pc - 1), &info) || !info.dli_fname) {
    snprintf(buf, cap, "0x%" PRIxPTR, pc);
    return;
  }
  const char *lib = strrchr(info.dli_fname, '/');
  lib = lib ? lib + 1 : info.dli_fname;
  if (!lib[0]) lib = "(main program)";
  if (info.dli_sname && info.dli_saddr)
    snprintf(buf, cap, "%s!%s+0x%" PRIxPTR, lib, info.dli_sname, pc - (uintptr_t)info.dli_saddr);
  else
    snprintf(buf, cap, "%s+0x%" PRIxPTR, lib, pc - (uintptr_t)info.dli_fbase);
}

size_t gc_site_format_frames(void *const *frames, size_t count, char *buf, size_t cap) {
  if (!buf || cap == 0) return 0;
  buf[0] = '\0';
  size_t len = 0, shown = 0;
  for (size_t i = 0; frames && i < count; i++) {
    char one[256];
    gc_site_of(frames[i], one, sizeof one);
    const char *sep = shown ? " <- " : "";
    size_t need = strlen(sep) + strlen(one);
    if (len + need >= cap) break; /* whole frames only */
    len += (size_t)snprintf(buf + len, cap - len, "%s%s", sep, one);
    shown++;
  }
  return shown;
}

void gc_site_parts(uintptr_t pc, char *name, size_t name_cap, char *file, size_t file_cap) {
  if (!name || !file || name_cap == 0 || file_cap == 0) return;
  Dl_info info;
  memset(&info, 0, sizeof info);
  file[0] = '\0';
  if (pc == 0 || !dladdr((void *)(pc - 1), &info) || !info.dli_fname) {
    snprintf(name, name_cap, "0x%" PRIxPTR, pc);
    return;
  }
  /* The main program's dli_fname is "" on some loaders: named as the report names it. */
  snprintf(file, file_cap, "%s", info.dli_fname[0] ? info.dli_fname : "(main program)");
  if (info.dli_sname && info.dli_saddr)
    snprintf(name, name_cap, "%s+0x%" PRIxPTR, info.dli_sname, pc - (uintptr_t)info.dli_saddr);
  else
    snprintf(name, name_cap, "+0x%" PRIxPTR, pc - (uintptr_t)info.dli_fbase);
}

bool gc_site_object(uintptr_t pc, char *path, size_t cap) {
  if (!path || cap == 0) return false;
  Dl_info info;
  memset(&info, 0, sizeof info);
  if (pc == 0 || !dladdr((void *)(pc - 1), &info) || !info.dli_fname) {
    snprintf(path, cap, "(unknown)");
    return false;
  }
  snprintf(path, cap, "%s", info.dli_fname[0] ? info.dli_fname : "(main program)");
  return true;
}
