# Run by `cmake --install` (deploy/CMakeLists.txt): makes the systemd units
# from their templates with the paths of the prefix being installed into,
# which `cmake --install --prefix P` and CPack's staging choose at install
# time, not at configure time. Set before it is included:
#   ONCEQ_UNIT_TEMPLATES  the .in files
#   ONCEQ_UNIT_STAGING    a build-tree folder to write the units in
#   ONCEQ_UNIT_BINDIR, ONCEQ_UNIT_SYSCONFDIR, ONCEQ_UNIT_DOCDIR  the
#       GNUInstallDirs dirs as configured (relative to the prefix, or absolute)
#   ONCEQ_STATE_DIR       the journal's place, systemd's StateDirectory
set(prefix "${CMAKE_INSTALL_PREFIX}")
# GNUInstallDirs' rule for the full paths, applied to this prefix: an
# absolute dir stays, a relative one goes under the prefix, and with the
# prefix /usr the configuration lives in /etc.
function(s_full var dir)
  if(IS_ABSOLUTE "${dir}")
    set(${var} "${dir}" PARENT_SCOPE)
  else()
    set(${var} "${prefix}/${dir}" PARENT_SCOPE)
  endif()
endfunction()
s_full(CMAKE_INSTALL_FULL_BINDIR "${ONCEQ_UNIT_BINDIR}")
if(prefix STREQUAL "/usr" AND ONCEQ_UNIT_SYSCONFDIR STREQUAL "etc")
  set(sysconfdir "/etc")
else()
  s_full(sysconfdir "${ONCEQ_UNIT_SYSCONFDIR}")
endif()
s_full(docdir "${ONCEQ_UNIT_DOCDIR}")
set(ONCEQ_CONF_DIR "${sysconfdir}/onceq")
set(ONCEQ_EXAMPLES_DIR "${docdir}/examples")

set(units "")
foreach(template ${ONCEQ_UNIT_TEMPLATES})
  get_filename_component(name "${template}" NAME_WLE)
  configure_file("${template}" "${ONCEQ_UNIT_STAGING}/${name}" @ONLY)
  list(APPEND units "${ONCEQ_UNIT_STAGING}/${name}")
endforeach()
file(INSTALL ${units} DESTINATION "${prefix}/lib/systemd/system")
