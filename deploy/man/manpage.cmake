# cmake -DHELP2MAN=... -DPROGRAM=BIN -DWHAT=TEXT -DVERSION=V -DOUT=PAGE.1.gz -P manpage.cmake
#
# One man page from PROGRAM --help, gzipped as Debian installs them
# (gzip -n: no name or time stamp, so the same build makes the same bytes).
# Figures of the build machine that --help prints (onceq-broker's memory)
# are cut: the page is read on other machines.
execute_process(
  COMMAND ${HELP2MAN} --no-info --no-discard-stderr --section=1
          --version-string=${VERSION} "--source=onceq ${VERSION}" --name=${WHAT} ${PROGRAM}
  OUTPUT_VARIABLE page
  ERROR_VARIABLE err
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR page STREQUAL "")
  message(FATAL_ERROR "help2man ${PROGRAM} failed (${rc}): ${err}")
endif()
string(REGEX REPLACE ", here [0-9]+\\)" ")" page "${page}")
string(REGEX REPLACE "\\.gz$" "" plain "${OUT}")
file(WRITE ${plain} "${page}")
execute_process(COMMAND gzip -9nf ${plain} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gzip ${plain} failed (${rc})")
endif()
