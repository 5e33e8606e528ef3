// Device discovery for the CUDA backend, and a one-kernel round trip that proves a device runs our sm_90 code.
#pragma once

namespace moe::cuda {

// Number of visible CUDA devices; 0 when there is no GPU or no driver (never throws).
int visible_device_count();

// Launches a kernel that writes out[i] = a*i + b for i < n on device 0 and copies it back.
// Returns false if the launch or copy failed. Requires visible_device_count() > 0.
bool axpb_roundtrip(int n, double a, double b, double* out);

}  // namespace moe::cuda
