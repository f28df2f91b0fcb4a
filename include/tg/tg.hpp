// tinygrad.cpp: everything public. #include <tg/tg.hpp>, namespace tg.
#pragma once
#include "tg/device.hpp"
#include "tg/dtype.hpp"
#include "tg/helpers.hpp"
#include "tg/jit.hpp"
#include "tg/nn.hpp"
#include "tg/optim.hpp"
#include "tg/origin.hpp"
#include "tg/schedule.hpp"
#include "tg/shapetracker.hpp"
#include "tg/state.hpp"
#include "tg/symbolic.hpp"
#include "tg/tensor.hpp"
