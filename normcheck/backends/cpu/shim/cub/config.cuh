// normcheck cpu backend: what CUB's configuration header gives the code that includes it.
#pragma once
#include "normcheck_simt.h"
#ifndef CUB_NAMESPACE_BEGIN
#define CUB_NAMESPACE_BEGIN namespace cub {
#define CUB_NAMESPACE_END }
#define CUB_NS_QUALIFIER ::cub
#define CUB_NS_PREFIX
#define CUB_NS_POSTFIX
#endif
#ifndef CUB_VERSION
#define CUB_VERSION 300000  // the interface of CCCL 3.x that the shim follows
#endif
#ifndef CUB_PTX_ARCH
#define CUB_PTX_ARCH 0
#endif
#ifndef CUB_MAX
#define CUB_MAX(a, b) (((b) > (a)) ? (b) : (a))
#define CUB_MIN(a, b) (((b) < (a)) ? (b) : (a))
#endif
