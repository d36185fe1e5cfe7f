# Warning and sanitizer flags shared by every fusetune target.
add_library(fusetune_flags INTERFACE)
target_compile_options(fusetune_flags INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wcast-align -Wunused
  -Woverloaded-virtual -Wnull-dereference -Wimplicit-fallthrough)
if(FUSETUNE_WERROR)
  target_compile_options(fusetune_flags INTERFACE -Werror)
endif()
if(FUSETUNE_SANITIZE)
  target_compile_options(fusetune_flags INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer
                                                  -fno-sanitize-recover=undefined)
  target_link_options(fusetune_flags INTERFACE -fsanitize=address,undefined)
endif()
