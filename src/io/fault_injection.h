// io/fault_injection.h: test-only faults at the write call, switched on by environment
// variables that only the reliability tests set (tests/python/test_reliability.py):
//   OCTET_TEST_ENOSPC_AFTER_BYTES=N  writes fail with ENOSPC ("No space left on device")
//                                    once this process has written N bytes through AtomicFile
//                                    (a full disk where no small tmpfs can be mounted)
//   OCTET_TEST_WRITE_DELAY_MS=M      every AtomicFile write sleeps M ms first (a slow disk,
//                                    so that a signal or kill -9 lands inside a checkpoint)
// Unset (always, outside those tests) they cost one branch per write.
// defines: io_fault_before_write
#pragma once

#include <cstddef>

namespace octet {

// Called before writing `bytes`: sleeps if asked, and returns the errno the write must fail
// with (ENOSPC) or 0.
int io_fault_before_write(size_t bytes);

}  // namespace octet
