# Finds Tessera's dependencies. Every one comes from a Debian package installed by tools/setup.sh.

find_program(CCACHE_PROGRAM ccache)
if(CCACHE_PROGRAM)
  set(CMAKE_C_COMPILER_LAUNCHER ${CCACHE_PROGRAM})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${CCACHE_PROGRAM})
  message(STATUS "tessera: using ccache (${CCACHE_PROGRAM})")
endif()

# ANTLR 4: the tool (Debian's antlr4, 4.7.2) generates the parser at build time; the C++ runtime is
# libantlr4-runtime-dev (4.9). Only frontend/ sees the runtime's headers.
find_program(ANTLR4_TOOL antlr4)
if(NOT ANTLR4_TOOL)
  message(FATAL_ERROR "tessera: the `antlr4` tool is missing; run tools/setup.sh")
endif()
find_path(ANTLR4_INCLUDE_DIR antlr4-runtime.h PATH_SUFFIXES antlr4-runtime)
find_library(ANTLR4_RUNTIME_LIB NAMES libantlr4-runtime.a antlr4-runtime)
if(TSR_PYTHON)
  find_library(ANTLR4_RUNTIME_SHARED_LIB NAMES libantlr4-runtime.so antlr4-runtime)
endif()
if(NOT ANTLR4_INCLUDE_DIR OR NOT ANTLR4_RUNTIME_LIB)
  message(FATAL_ERROR "tessera: the ANTLR 4 C++ runtime is missing; run tools/setup.sh")
endif()
add_library(antlr4_runtime INTERFACE)
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  # The 4.9 runtime's misc/InterpreterDataReader.h does not compile with clang in C++20 mode (it
  # default-constructs a dfa::Vocabulary, whose default constructor C++20 deletes). Nothing in
  # Tessera or the generated parser uses it, so clang builds get a copy of the umbrella header
  # without it, ahead of the original on the include path.
  file(READ ${ANTLR4_INCLUDE_DIR}/antlr4-runtime.h TSR_ANTLR_UMBRELLA)
  string(REPLACE "#include \"misc/InterpreterDataReader.h\"" "" TSR_ANTLR_UMBRELLA "${TSR_ANTLR_UMBRELLA}")
  file(WRITE ${CMAKE_BINARY_DIR}/antlr-shim/antlr4-runtime.h "${TSR_ANTLR_UMBRELLA}")
  target_include_directories(antlr4_runtime SYSTEM BEFORE INTERFACE ${CMAKE_BINARY_DIR}/antlr-shim)
endif()
target_include_directories(antlr4_runtime SYSTEM INTERFACE ${ANTLR4_INCLUDE_DIR})
if(TSR_PYTHON AND ANTLR4_RUNTIME_SHARED_LIB)
  # The Python extension modules (python/, MODULE libraries) link the shared runtime: Debian's
  # static one is not position-independent. The executables keep the static one, so that they
  # still need only libz, libzstd and libstdc++ where they are carried (tools/gpu/pack.sh).
  target_link_libraries(antlr4_runtime INTERFACE
    $<IF:$<STREQUAL:$<TARGET_PROPERTY:TYPE>,MODULE_LIBRARY>,${ANTLR4_RUNTIME_SHARED_LIB},${ANTLR4_RUNTIME_LIB}>)
else()
  target_link_libraries(antlr4_runtime INTERFACE ${ANTLR4_RUNTIME_LIB})
endif()

find_package(CLI11 CONFIG QUIET)
find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp)
if(NOT CLI11_INCLUDE_DIR)
  message(FATAL_ERROR "tessera: CLI11 is missing; run tools/setup.sh")
endif()
find_package(nlohmann_json 3 CONFIG REQUIRED)
find_path(DOCTEST_INCLUDE_DIR doctest/doctest.h)

# LLVM 19: code generation (codegen/). Found here so that a missing LLVM is reported up front.
# (LLVM's version file accepts only an exact major.minor request, so the major is checked here.)
find_package(LLVM CONFIG QUIET PATHS /usr/lib/llvm-19/lib/cmake/llvm NO_DEFAULT_PATH)
if(LLVM_FOUND AND LLVM_VERSION_MAJOR EQUAL 19)
  message(STATUS "tessera: LLVM ${LLVM_PACKAGE_VERSION} at ${LLVM_DIR}")
else()
  message(FATAL_ERROR "tessera: LLVM 19 is missing (llvm-19-dev); run tools/setup.sh")
endif()

# The CUDA toolkit (cuda.h, nccl.h, ptxas) is not a Debian package. Without it Tessera still builds
# and runs on the CPU, but no PTX is assembled and no GPU kernel is checked: say so loudly.
find_package(CUDAToolkit QUIET)
if(CUDAToolkit_FOUND)
  find_program(TSR_PTXAS ptxas HINTS ${CUDAToolkit_BIN_DIR})
  message(STATUS "tessera: CUDA toolkit ${CUDAToolkit_VERSION} at ${CUDAToolkit_BIN_DIR} (ptxas: ${TSR_PTXAS})")
else()
  message(WARNING
    "\n*** tessera: the CUDA toolkit was NOT found (looked for /usr/local/cuda).\n"
    "*** GPU code generation is still built, but generated PTX will not be assembled with ptxas\n"
    "*** and the GPU tests cannot be checked. Install the CUDA toolkit or set CUDAToolkit_ROOT.\n")
endif()

# ONNX (onnx/, the importer): Debian's libonnx-dev, whose ONNXConfig.cmake needs Protobuf found
# first (libprotobuf-dev). Only the compiler's front end links it; a deployed bundle's runtime never does.
find_package(Protobuf REQUIRED)
find_package(ONNX CONFIG REQUIRED)
message(STATUS "tessera: ONNX ${ONNX_VERSION}, Protobuf ${Protobuf_VERSION}")
