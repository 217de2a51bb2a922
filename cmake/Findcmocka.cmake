# Findcmocka.cmake - finds cmocka's header and library (the unit tests'
# framework).  Sets cmocka_FOUND, CMOCKA_INCLUDE_DIR and CMOCKA_LIB.
# -DCMAKE_DISABLE_FIND_PACKAGE_cmocka=ON makes a build as if it were absent.
find_path(CMOCKA_INCLUDE_DIR cmocka.h)
find_library(CMOCKA_LIB cmocka)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(cmocka REQUIRED_VARS CMOCKA_LIB CMOCKA_INCLUDE_DIR)
mark_as_advanced(CMOCKA_INCLUDE_DIR CMOCKA_LIB)
