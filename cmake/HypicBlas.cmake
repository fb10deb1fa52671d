# BLAS selection. HYPIC_BLAS = OpenBLAS (default) | BLIS | Generic (any CBLAS FindBLAS finds).
# Result: the INTERFACE target hypic::blas with compile definitions naming the library,
# and HYPIC_BLAS_SUMMARY describing the library and the kernel it runs on this machine.
set(HYPIC_BLAS "OpenBLAS" CACHE STRING "BLAS vendor: OpenBLAS, BLIS or Generic")
set_property(CACHE HYPIC_BLAS PROPERTY STRINGS OpenBLAS BLIS Generic)

add_library(hypic_blas INTERFACE)
add_library(hypic::blas ALIAS hypic_blas)

if(HYPIC_BLAS STREQUAL "OpenBLAS")
  find_path(HYPIC_OPENBLAS_INCLUDE cblas.h
            PATH_SUFFIXES openblas openblas-pthread x86_64-linux-gnu/openblas-pthread)
  find_library(HYPIC_OPENBLAS_LIB NAMES openblas REQUIRED)
  target_include_directories(hypic_blas SYSTEM INTERFACE ${HYPIC_OPENBLAS_INCLUDE})
  target_link_libraries(hypic_blas INTERFACE ${HYPIC_OPENBLAS_LIB})
  target_compile_definitions(hypic_blas INTERFACE HYPIC_BLAS_OPENBLAS=1)
  set(_blas_lib ${HYPIC_OPENBLAS_LIB})
elseif(HYPIC_BLAS STREQUAL "BLIS")
  find_path(HYPIC_BLIS_INCLUDE blis/cblas.h REQUIRED)
  find_library(HYPIC_BLIS_LIB NAMES blis-mt blis REQUIRED)
  target_include_directories(hypic_blas SYSTEM INTERFACE ${HYPIC_BLIS_INCLUDE}/blis)
  target_link_libraries(hypic_blas INTERFACE ${HYPIC_BLIS_LIB})
  target_compile_definitions(hypic_blas INTERFACE HYPIC_BLAS_BLIS=1)
  set(_blas_lib ${HYPIC_BLIS_LIB})
elseif(HYPIC_BLAS STREQUAL "Generic")
  find_package(BLAS REQUIRED)
  find_path(HYPIC_CBLAS_INCLUDE cblas.h REQUIRED)
  target_include_directories(hypic_blas SYSTEM INTERFACE ${HYPIC_CBLAS_INCLUDE})
  target_link_libraries(hypic_blas INTERFACE BLAS::BLAS)
  target_compile_definitions(hypic_blas INTERFACE HYPIC_BLAS_GENERIC=1)
  set(_blas_lib "${BLAS_LIBRARIES}")
else()
  message(FATAL_ERROR "HYPIC_BLAS='${HYPIC_BLAS}': choose OpenBLAS, BLIS or Generic")
endif()

# Ask the library, on this machine, which compute kernel it selects. OpenBLAS 0.3.21
# mis-detects recent Xeons as "Prescott"; hypic then re-executes itself with a correct
# OPENBLAS_CORETYPE (kernels/host/blas.cpp), and the summary says so.
set(HYPIC_BLAS_SUMMARY "${HYPIC_BLAS} (${_blas_lib})")
if(HYPIC_BLAS STREQUAL "OpenBLAS" AND NOT CMAKE_CROSSCOMPILING)
  set(_probe "${CMAKE_BINARY_DIR}/CMakeFiles/hypic_blas_probe.c")
  file(WRITE "${_probe}" "#include <stdio.h>\nchar* openblas_get_corename(void);\nchar* openblas_get_config(void);\nint main(void){printf(\"%s|%s\", openblas_get_corename(), openblas_get_config());return 0;}\n")
  try_run(_run_rc _compile_ok "${CMAKE_BINARY_DIR}/CMakeFiles/hypic_blas_probe" "${_probe}"
          LINK_LIBRARIES ${HYPIC_OPENBLAS_LIB} RUN_OUTPUT_VARIABLE _probe_out)
  if(_compile_ok AND _run_rc EQUAL 0)
    string(REPLACE "|" ";" _probe_parts "${_probe_out}")
    list(GET _probe_parts 0 _core)
    list(GET _probe_parts 1 _cfg)
    set(HYPIC_BLAS_SUMMARY "${_cfg}; detected kernel ${_core}")
    if(_core MATCHES "^[Pp]rescott$")
      set(HYPIC_BLAS_SUMMARY "${HYPIC_BLAS_SUMMARY} (mis-detection: hypic forces an AVX-512/AVX2 kernel at run time)")
    endif()
  endif()
endif()
