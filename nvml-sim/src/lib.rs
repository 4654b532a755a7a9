//! NVML stand-in.
