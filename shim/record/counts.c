#include "counts.h"

gc_counters gc_counts;
