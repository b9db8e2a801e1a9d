/* Second definition, the one RTLD_NEXT from lib_next_a must find. */
int gc_probe_next(void);

int gc_probe_next(void) {
  return 2;
}
