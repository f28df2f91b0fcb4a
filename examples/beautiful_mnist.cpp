// tinygrad's beautiful_mnist in C++: a small CNN trained with Adam (cosine learning-rate decay) and TinyJit
// on (Fashion-)MNIST.
//   beautiful_mnist [--steps N] [--bs N] [--device CPU|CUDA] [--data DIR (default $DATASETS/fashion-mnist)] [--save FILE] [--eval FILE] [--mnist]
// Prints a progress line per step and, at the end, "test accuracy: NN.NN%".
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "tg/tg.hpp"
#include "mnist_model.hpp"

using namespace tg;

int main(int argc, char** argv) {
  int64_t steps = getenv("STEPS", 1000), bs = getenv("BS", 512);   // Fashion-MNIST: 1000 steps gave 91.3%
  std::string device, data_dir, save_path, eval_path;
  bool digits = false;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw Error("beautiful_mnist: " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--steps") steps = std::stoll(next());
    else if (a == "--bs") bs = std::stoll(next());
    else if (a == "--device") device = next();
    else if (a == "--data") data_dir = next();
    else if (a == "--save") save_path = next();
    else if (a == "--eval") eval_path = next();
    else if (a == "--mnist") digits = true;
    else {
      std::fprintf(stderr, "usage: %s [--steps N] [--bs N] [--device CPU|CUDA] [--data DIR (default $DATASETS/fashion-mnist)] [--save FILE] [--eval FILE] [--mnist]\n", argv[0]);
      return 2;
    }
  }
  try {
    if (!device.empty()) setenv("DEVICE", device.c_str(), 1);
    auto ds = digits ? nn::datasets::mnist(data_dir) : nn::datasets::fashion_mnist(data_dir);
    std::printf("%s: train %s, test %s on %s\n", digits ? "mnist" : "fashion-mnist", to_str(ds.X_train.shape()).c_str(),
                to_str(ds.X_test.shape()).c_str(), Device::default_device().c_str());

    MnistModel model;
    auto test_acc_fn = TinyJit([&](const std::vector<Tensor>&) {
      return std::vector<Tensor>{(model(ds.X_test).argmax(1) == ds.Y_test).mean() * 100};
    });
    if (!eval_path.empty()) {
      nn::state::load_state_dict(model, nn::state::safe_load(eval_path));
      std::printf("test accuracy: %.2f%%\n", test_acc_fn({})[0].item<float>());
      return 0;
    }

    auto opt = nn::optim::Adam(nn::state::get_parameters(model));
    auto jit_step = TinyJit([&](const std::vector<Tensor>&) {
      Tensor samples = Tensor::randint({bs}, 0, ds.X_train.shape()[0]);
      return std::vector<Tensor>{train_step(model, *opt, ds.X_train[{samples}], ds.Y_train[{samples}])};
    });

    float test_acc = NAN;
    const double lr0 = opt->lr->item<float>();
    for (int64_t i = 0; i < steps; i++) {
      // cosine decay to 0: the last steps settle the weights instead of bouncing around a minimum
      opt->lr->assign(Tensor::full({1}, lr0 * 0.5 * (1 + std::cos(M_PI * double(i) / double(steps))))).realize();
      GlobalCounters::reset();
      Timing t("", false);
      float loss = jit_step({})[0].item<float>();
      double ms = t.elapsed_ms();
      if (i % 10 == 9 || i == steps - 1) test_acc = test_acc_fn({})[0].item<float>();
      int done = int(40 * (i + 1) / steps);
      std::printf("\r%3d%%|%s%s| %lld/%lld loss: %6.2f step: %7.1f ms test_accuracy: %5.2f%%", int(100 * (i + 1) / steps),
                  std::string(done, '#').c_str(), std::string(40 - done, ' ').c_str(), (long long)(i + 1), (long long)steps, loss, ms,
                  test_acc);
      std::fflush(stdout);
    }
    std::printf("\n");
    if (!save_path.empty()) {
      nn::state::safe_save(nn::state::get_state_dict(model), save_path);
      std::printf("saved weights to %s\n", save_path.c_str());
    }
    std::printf("test accuracy: %.2f%%\n", test_acc);
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
