#include "exec/memory/host_heap.hpp"

#include <climits>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace zerolens::exec {

bool keep_host_heap() {
#if defined(__GLIBC__)
  // M_MMAP_MAX 0: no allocation is mmapped, so none is unmapped on free (mallopt(3)).
  // M_TRIM_THRESHOLD: the heap's free top is never given back with sbrk.
  const bool no_mmap = mallopt(M_MMAP_MAX, 0) == 1;
  const bool no_trim = mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1;
  return no_mmap && no_trim;
#else
  return false;
#endif
}

}  // namespace zerolens::exec
