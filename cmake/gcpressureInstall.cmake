# The install layout (README.md, "Build and install"). Included by the root
# CMakeLists.txt before any subdirectory, so that the runtime bindings can
# install themselves with one call each.
#
#   <prefix>/include/gcpressure/           the C++ and C headers
#   <prefix>/<libdir>/                      libgcpressure_core.a, libgcpressure_gc_bridge.a, libgcpressure.so
#   <prefix>/<libdir>/cmake/gcpressure/     gcpressureConfig.cmake: find_package(gcpressure)
#   <prefix>/<libdir>/pkgconfig/            gcpressure.pc: the C API
#   <prefix>/lib/lua/5.4/gcpressure.so      Lua 5.4's cpath under the prefix
#   Guile's site directories, moved under the prefix (e.g. for Debian's guile-3.0):
#   <prefix>/share/guile/site/3.0/gcpressure.scm
#   <prefix>/lib/<multiarch>/guile/3.0/site-ccache/gcpressure.go
#   <prefix>/lib/<multiarch>/guile/3.0/extensions/libguile-gcpressure.so
include(GNUInstallDirs)
set(GCPRESSURE_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/gcpressure)
set(GCPRESSURE_INSTALL_LUA_CMODDIR lib/lua/5.4 CACHE STRING
  "Where the Lua module goes, relative to the prefix (Lua 5.4's cpath has <prefix>/lib/lua/5.4/?.so)")

# Note [Installed modules find libgcpressure.so]
# A runtime loads a binding by path (Lua's cpath, Guile's extension path);
# the binding then needs libgcpressure.so, which sits in <prefix>/<libdir>,
# a folder the dynamic loader does not search for an arbitrary prefix. Each
# installed module carries an RPATH relative to itself ($ORIGIN), so the
# installed tree works wherever the prefix is, and moved as a whole.
function(gcpressure_install_module target destination)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
    set(_rpath "${CMAKE_INSTALL_LIBDIR}")
  else()
    file(RELATIVE_PATH _rel "/prefix/${destination}" "/prefix/${CMAKE_INSTALL_LIBDIR}")
    set(_rpath "$ORIGIN/${_rel}")
  endif()
  set_target_properties(${target} PROPERTIES INSTALL_RPATH "${_rpath}")
  install(TARGETS ${target} LIBRARY DESTINATION ${destination})
endfunction()

# Guile's directory `variable` (pkg-config guile-3.0) relative to Guile's own
# prefix, so it lands under ours: /usr/share/guile/site/3.0 -> share/guile/site/3.0.
function(gcpressure_guile_dir out variable fallback)
  pkg_get_variable(_dir guile-3.0 ${variable})
  pkg_get_variable(_prefix guile-3.0 prefix)
  if(_dir AND _prefix AND _dir MATCHES "^${_prefix}/(.*)$")
    set(${out} ${CMAKE_MATCH_1} PARENT_SCOPE)
  else()
    set(${out} ${fallback} PARENT_SCOPE)
  endif()
endfunction()

# The Guile extension, its module source and its compiled module.
function(gcpressure_install_guile extension scm go)
  gcpressure_guile_dir(_ext extensiondir ${CMAKE_INSTALL_LIBDIR}/guile/3.0/extensions)
  gcpressure_guile_dir(_site sitedir ${CMAKE_INSTALL_DATADIR}/guile/site/3.0)
  gcpressure_guile_dir(_ccache siteccachedir ${CMAKE_INSTALL_LIBDIR}/guile/3.0/site-ccache)
  gcpressure_install_module(${extension} ${_ext})
  install(FILES ${scm} DESTINATION ${_site})
  install(FILES ${go} DESTINATION ${_ccache})
endfunction()
