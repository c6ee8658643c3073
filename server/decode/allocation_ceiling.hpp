// A ceiling on any single C++ allocation (operator new) made on this
// thread: above it, new throws std::bad_alloc before malloc is asked.
//
// For libraries that allocate what a file declares before reading it.
// GDCM sizes each value at the length an element declares, and where a
// data set does not read as it should it reads it again (a sequence's
// items as another encoding, a delimiter's length as a fragment, a nested
// item past its declared end): lengths that no walk of the file's framing
// can foresee (fuzz_dicom: 100 MB to 1.9 GB from files of 4 KB). Under a
// ceiling of the file's own size such a read fails instead.
//
// This file's object replaces the global operator new and delete (every
// form, over malloc and free) in whatever program links it.
#pragma once

#include <cstddef>

namespace imgstat {

// Sets this thread's ceiling (0: none) and returns the one it replaces;
// what was refused is forgotten.
// Set and restored by hand where a longjmp may pass (decode/dicom).
size_t exchange_allocation_ceiling(size_t bytes);

// Bytes of the last allocation this thread was refused since its ceiling
// was set (0: none).
size_t last_refused_allocation();

}  // namespace imgstat
