"""The code of the gpucache command (scripts/gpucache is only its entry point).

One module per concern:
  common     version, exit statuses, CliError
  units      numbers for people (report/render/format.c)
  safe_file  the rule for files in shared directories (report/output/safe_file.c)
  schema     reading a JSON report and checking its shape (docs/REPORT.md)
  options    signals and report paths as the shim reads them (shim/options.c)
  text       the text report (report/render/text.c, character for character)
  holders    memory by library and the inner allocators' paragraphs (report/holders.c)
  diff       `diff`: two reports (or two jobs' rank reports) compared, growth thresholds
  merge      `merge`: a job's per-rank reports as one view; report sets as diff and snapshot
             read them
  run        `run`: a program started under libgpucache.so
  snapshot   `snapshot`: live reports asked of a running process, or of a job's processes
  memory_snapshot  memory snapshots (GPUCACHE_SNAPSHOT): loading one safely, memory over time
  plot       `plot`: memory over time from a memory snapshot, or a report's figures
  cli        the parser, `show`, main()
A new command gets a module of its own with a cmd_NAME(args), registered in cli.build_parser.
Python 3.9+, standard library only, except `plot`, which needs matplotlib (imported only there).
"""
