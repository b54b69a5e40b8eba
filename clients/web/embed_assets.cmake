# Turn each asset file into a C string in one generated source, so that
# onceq-web serves them from the binary: no files to install, no network.
# Inputs: OUT, and ASSETS as NAME=PATH pairs separated by ';'.
set(text "/* Generated from clients/web/assets by embed_assets.cmake: do not edit. */\n")
foreach(pair ${ASSETS})
  string(REPLACE "=" ";" parts "${pair}")
  list(GET parts 0 name)
  list(GET parts 1 path)
  file(READ "${path}" hex HEX)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(APPEND text "const char ${name}[] = {${bytes}0x00};\n")
endforeach()
file(WRITE "${OUT}.tmp" "${text}")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
