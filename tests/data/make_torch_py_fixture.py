"""Generates tests/data/torchsave_zip.pt and tests/data/torchsave_legacy.pt, the torch.save-style
torch_load fixtures, without PyTorch: a stand-in `torch` module gives the pickle the same globals
torch.save writes (torch._utils._rebuild_tensor_v2, torch.FloatStorage, _rebuild_parameter,
collections.OrderedDict with a _metadata attribute) and the same persistent ids, pickle protocol 2.
Run by hand from the repository root when the fixture must change: python3 tests/data/make_torch_py_fixture.py
tests/test_formats.cpp checks the values written here; keep the two in sync."""
import collections, io, os, pickle, struct, sys, tempfile, types, zipfile

torch = types.ModuleType("torch"); torch._utils = types.ModuleType("torch._utils")
sys.modules["torch"], sys.modules["torch._utils"] = torch, torch._utils
FMT = {"FloatStorage": "f", "DoubleStorage": "d", "LongStorage": "q", "IntStorage": "i"}
for n in FMT: setattr(torch, n, type(n, (), {"__module__": "torch"}))
def _rebuild_tensor_v2(*a): raise RuntimeError("never called")
def _rebuild_parameter(*a): raise RuntimeError("never called")
_rebuild_tensor_v2.__module__ = _rebuild_parameter.__module__ = "torch._utils"
torch._utils._rebuild_tensor_v2, torch._utils._rebuild_parameter = _rebuild_tensor_v2, _rebuild_parameter

class Storage:
  def __init__(self, key, kind, values): self.key, self.kind, self.values = key, kind, values
  def data(self): return struct.pack("<%d%s" % (len(self.values), FMT[self.kind]), *self.values)
class Tensor:
  def __init__(self, storage, offset, size, stride): self.args = (storage, offset, size, stride)
  def __reduce_ex__(self, proto): return (_rebuild_tensor_v2, self.args + (False, collections.OrderedDict()))
class Parameter:
  def __init__(self, t): self.t = t
  def __reduce_ex__(self, proto): return (_rebuild_parameter, (self.t, True, collections.OrderedDict()))

s_w = Storage("0", "FloatStorage", [0.5, -1.0, 2.0, 3.5, -4.25, 8.0])
s_b = Storage("1", "FloatStorage", [0.25, -0.75])
s_m = Storage("2", "DoubleStorage", [1.5, 2.5, -3.5])
s_n = Storage("3", "LongStorage", [123456789012])
s_p = Storage("4", "IntStorage", [0, 1, 2, 3, 4, 5])
sd = collections.OrderedDict()
sd["fc.weight"] = Parameter(Tensor(s_w, 0, (2, 3), (3, 1)))
sd["fc.bias"] = Parameter(Tensor(s_b, 0, (2,), (1,)))
sd["bn.running_mean"] = Tensor(s_m, 1, (2,), (1,))          # storage offset 1: [2.5, -3.5]
sd["bn.num_batches_tracked"] = Tensor(s_n, 0, (), ())
sd._metadata = collections.OrderedDict([("", {"version": 1}), ("fc", {"version": 1})])
ckpt = {"model": sd, "step": 7, "lr": 0.1, "tags": ["a", "b"],
        "permuted": Tensor(s_p, 0, (3, 2), (1, 3)),           # the transpose of [[0,1,2],[3,4,5]]
        "layers": [Tensor(s_w, 3, (3,), (1,)), Tensor(s_b, 0, (2,), (1,))]}
storages = [s_w, s_b, s_m, s_n, s_p]

def dumps(obj, legacy):
  buf = io.BytesIO()
  class P(pickle.Pickler):
    def persistent_id(self, o):
      if not isinstance(o, Storage): return None
      return ("storage", getattr(torch, o.kind), o.key, "cpu", len(o.values)) + ((None,) if legacy else ())
  P(buf, protocol=2).dump(obj)
  return buf.getvalue()

out = os.path.join(os.path.dirname(os.path.abspath(__file__)))
with zipfile.ZipFile(os.path.join(out, "torchsave_zip.pt"), "w") as z:
  z.writestr("ckpt/data.pkl", dumps(ckpt, False), zipfile.ZIP_STORED)
  z.writestr("ckpt/byteorder", b"little", zipfile.ZIP_STORED)
  for s in storages:   # one storage deflated, as a re-zipped checkpoint would have it
    z.writestr("ckpt/data/" + s.key, s.data(), zipfile.ZIP_DEFLATED if s.key == "2" else zipfile.ZIP_STORED)
  z.writestr("ckpt/version", b"3\n", zipfile.ZIP_STORED)
with open(os.path.join(out, "torchsave_legacy.pt"), "wb") as f:
  for header in (0x1950a86a20f9469cfc6c, 1001, {"protocol_version": 1001, "little_endian": True,
                 "type_sizes": {"short": 2, "int": 4, "long": 4}}):
    f.write(pickle.dumps(header, protocol=2))
  f.write(dumps(ckpt, True))
  f.write(pickle.dumps(sorted(s.key for s in storages), protocol=2))
  for s in sorted(storages, key=lambda s: s.key): f.write(struct.pack("<q", len(s.values)) + s.data())
