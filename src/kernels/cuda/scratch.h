// kernels/cuda/scratch.h: the guard of the static cross-block scratch some kernels keep
// in device memory (quantize's amax/scale state, the fixed-grid sums' partials, RMSNorm's
// dweight partials). Kernels never allocate, so that scratch is one static copy per
// device, shared by every launch; it is only correct while those launches run one after
// another, i.e. on one stream at a time. CUDA only; internal to kernels/cuda.
// defines: claim_static_scratch
#pragma once

namespace octet::kernels::cuda {

// Called by an op that uses static scratch, after it set its device and before it
// launches: records the current octet stream as the scratch's owner on this device. A
// call on another stream while the owner still has work queued throws octet::Error
// ([op] ...), since the two launches could overlap and silently corrupt each other's
// amax, scales or sums. Once the owner is idle, the new stream takes over.
void claim_static_scratch(const char* op);

}  // namespace octet::kernels::cuda
