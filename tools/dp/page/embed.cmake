# Writes OUT, a header holding IN (the run page's HTML) as the string kPageTemplate, so the dp
# binary carries its page; rewritten only when the text changed.
file(READ ${IN} text)
set(header "// Generated from tools/dp/page/page.html by tools/dp/page/embed.cmake.\n#pragma once\ninline constexpr const char* kPageTemplate = R\"dp_page(${text})dp_page\";\n")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT "${old}" STREQUAL "${header}")
  file(WRITE ${OUT} "${header}")
endif()
