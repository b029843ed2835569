"""cdctl kubelet-plugin: DRA gRPC servers, prepare/unprepare, CDI, ResourceSlice publishing, NVML."""
