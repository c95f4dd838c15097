// Found only when no real glog is on the include path (setup.py adds this folder with -idirafter):
// Paddle's wheel ships phi/core/compat/op_utils.h, which includes glog/logging.h but uses none of it,
// and does not ship glog's headers.
#pragma once
