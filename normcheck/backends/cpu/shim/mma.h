#error "normcheck cpu backend: WMMA / tensor cores (mma.h) are not supported by the SIMT shim"
