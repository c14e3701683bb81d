// tsr_nccl_info: whether NCCL can be opened (runtime/dist/Nccl.h) and, when not, why, with how
// to install it; exit 0 when it can, 1 otherwise. TSR_LIBNCCL names the library to open.
#include "runtime/dist/Nccl.h"

#include <cstdio>

int main() {
  if (tsr::rt::dist::nccl::available()) {
    std::printf("NCCL: available\n");
    return 0;
  }
  std::printf("NCCL: unavailable: %s\n", tsr::rt::dist::nccl::why().c_str());
  return 1;
}
