"""What a torch call does, by name: compute, allocation, view/layout, cast, metadata or housekeeping.

The data-flow analysis (``facts.py``) asks one question of every call it meets: does the result
carry *work* on the input's values (compute), fresh memory (allocation), the same values in another
layout or dtype (view / cast), or only the input's shape and dtype (metadata)?  The answer decides
whether an output "passes through torch compute" (a torch fallback), "is a view of the input" (a
passthrough) or "is a constant" (class 6).  Unknown ``torch.*`` functions default to compute: a
new torch function is far more likely to compute than to allocate.

``op_family`` maps the many spellings of one operation (``torch.relu``, ``F.relu``, ``x.relu()``,
``nn.ReLU``, ``torch.relu_``) to one name, so that a candidate's op can be matched against the
reference's ``forward_ops``.
"""

from __future__ import annotations

import functools
import re
from typing import Literal

Kind = Literal["compute", "alloc", "view", "cast", "meta", "host", "misc"]

# torch functions (last dotted component) that allocate rather than compute
ALLOC_FUNCS = frozenset({
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
    "tensor", "as_tensor", "from_numpy", "arange", "linspace", "logspace", "eye", "rand", "randn", "randint",
    "rand_like", "randn_like", "randint_like", "randperm", "scalar_tensor", "empty_permuted", "frombuffer",
})
# allocations whose contents are uninitialised: returning one unwritten is class 7
UNINITIALISED = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted"})
# allocations filled with a constant (class 6 when returned)
CONSTANT_FILL = frozenset({"zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "new_zeros", "new_ones",
                           "new_full", "tensor", "as_tensor", "scalar_tensor", "arange", "linspace", "eye"})
ALLOC_METHODS = frozenset({"new_empty", "new_zeros", "new_ones", "new_full", "new_tensor", "new_empty_strided"})

# same values, other layout (a view, a copy, a gather of whole rows)
VIEW_FUNCS = frozenset({
    "view", "view_as", "reshape", "reshape_as", "contiguous", "permute", "transpose", "t", "expand", "expand_as",
    "broadcast_to", "flatten", "unflatten", "squeeze", "unsqueeze", "narrow", "select", "detach", "clone",
    "movedim", "moveaxis", "swapaxes", "swapdims", "as_strided", "unfold", "split", "chunk", "unbind", "tensor_split",
    "cat", "concat", "concatenate", "stack", "hstack", "vstack", "dstack", "atleast_1d", "atleast_2d", "atleast_3d",
    "repeat", "tile", "repeat_interleave", "flip", "roll", "rot90", "diagonal", "real", "view_as_real",
    "view_as_complex", "requires_grad_", "pin_memory", "share_memory_", "detach_", "resolve_conj", "resolve_neg",
    "align_as", "refine_names", "rename", "index_select", "masked_select", "take", "gather", "squeeze_",
    "unsqueeze_", "t_", "transpose_", "as_strided_", "copy", "identity",
})
# these keep all values but a copy of them (or of a subset) — still "the input" for class 6
CAST_METHODS = frozenset({"to", "float", "half", "double", "bfloat16", "int", "long", "short", "bool", "byte", "char",
                          "type", "type_as", "cuda", "cpu", "float16", "float32"})
# The one metadata vocabulary: tensor attributes (META_ATTRS), methods (META_METHODS), torch functions
# (META_FUNCS) and builtins (META_BUILTINS) that read a tensor's metadata or identity, never its
# values; both the model's value flow (``valueflow``) and the per-function def-use facts
# (``patterns``) read them from here.
META_ATTRS = frozenset({"shape", "dtype", "device", "is_cuda", "ndim", "requires_grad", "layout", "is_sparse",
                        "is_quantized", "is_meta", "names", "grad_fn", "is_leaf", "itemsize", "nbytes", "output_nr",
                        "_version"})
META_METHODS = frozenset({"size", "dim", "ndimension", "numel", "nelement", "stride", "storage_offset", "data_ptr",
                          "element_size", "get_device", "is_contiguous", "is_floating_point", "is_complex",
                          "is_signed", "untyped_storage", "storage", "is_pinned", "is_set_to", "has_names",
                          "dim_order", "is_nonzero_size"})
META_FUNCS = frozenset({"numel", "is_tensor", "is_floating_point", "is_complex", "is_storage", "result_type",
                        "promote_types", "can_cast", "get_default_dtype", "is_grad_enabled", "broadcast_shapes",
                        "finfo", "iinfo", "device", "Size", "dtype", "typename", "is_nonzero", "get_device",
                        "is_inference_mode_enabled"})
META_BUILTINS = frozenset({"len", "isinstance", "issubclass", "hasattr", "callable", "type", "id", "hash"})
VIEW_ATTRS = frozenset({"T", "mT", "H", "mH", "data", "real", "imag"})
# values brought to the host: ``.item()``, ``.tolist()``, ``bool(t)``
HOST_METHODS = frozenset({"item", "tolist", "numpy", "__bool__", "__float__", "__int__"})

# namespaces under torch that are housekeeping, not tensor computation
MISC_PREFIXES = (
    "torch.cuda.", "torch.backends.", "torch.utils.", "torch.jit.", "torch._dynamo.", "torch.compiler.",
    "torch.distributed.", "torch.profiler.", "torch.library.", "torch.nn.init.", "torch.testing.",
    "torch.autograd.profiler.", "torch.multiprocessing.", "torch.hub.", "torch.onnx.", "torch.export.",
    "torch.fx.", "torch._inductor.", "torch.overrides.", "torch.random.", "torch.mps.", "torch.xpu.",
    "torch.amp.", "torch.cpu.", "torch.serialization.", "torch.package.", "torch.version.", "torch.sparse.check",
)
MISC_FUNCS = frozenset({
    "manual_seed", "seed", "initial_seed", "no_grad", "enable_grad", "set_grad_enabled", "inference_mode",
    "set_default_dtype", "set_default_device", "set_float32_matmul_precision", "get_float32_matmul_precision",
    "use_deterministic_algorithms", "set_num_threads", "get_num_threads", "set_printoptions", "compile",
    "Generator", "Stream", "Event", "set_flush_denormal", "autocast", "save", "load", "is_autocast_enabled",
    "set_anomaly_enabled", "get_rng_state", "set_rng_state", "cuda_is_available", "synchronize",
})

# Tensor methods that compute (the default for an unknown method on a tensor is compute too, but
# listing the common ones lets rules name them and keeps ``x.foo()`` on non-tensors quiet)
COMPUTE_METHODS = frozenset({
    "abs", "absolute", "acos", "add", "addbmm", "addcdiv", "addcmul", "addmm", "addmv", "addr", "all", "allclose",
    "amax", "amin", "aminmax", "angle", "any", "argmax", "argmin", "argsort", "asin", "atan", "atan2", "baddbmm",
    "bernoulli", "bmm", "ceil", "cholesky", "clamp", "clamp_max", "clamp_min", "clip", "cos", "cosh", "count_nonzero",
    "cross", "cummax", "cummin", "cumprod", "cumsum", "deg2rad", "diag", "diag_embed", "diff", "digamma", "dist",
    "div", "divide", "dot", "eq", "equal", "erf", "erfc", "erfinv", "exp", "exp2", "expm1", "fix", "floor",
    "floor_divide", "fmax", "fmin", "fmod", "frac", "ge", "gelu", "ger", "greater", "greater_equal", "gt", "hardshrink",
    "heaviside", "histc", "hypot", "index_add", "index_copy", "index_fill", "index_put", "inner", "inverse",
    "isclose", "isfinite", "isinf", "isnan", "isneginf", "isposinf", "kron", "kthvalue", "le", "lerp", "less",
    "less_equal", "lgamma", "log", "log10", "log1p", "log2", "log_softmax", "logaddexp", "logcumsumexp",
    "logdet", "logical_and", "logical_not", "logical_or", "logical_xor", "logit", "logsumexp", "lt", "lu",
    "masked_fill", "masked_scatter", "matmul", "matrix_exp", "matrix_power", "max", "maximum", "mean", "median",
    "min", "minimum", "mm", "mode", "msort", "mul", "multiply", "mv", "nan_to_num", "nanmean", "nanmedian",
    "nanquantile", "nansum", "ne", "neg", "negative", "nextafter", "nonzero", "norm", "normal", "not_equal", "outer",
    "pow", "prod", "quantile", "rad2deg", "reciprocal", "relu", "remainder", "renorm", "round", "rsqrt", "scatter",
    "scatter_add", "scatter_reduce", "sgn", "sigmoid", "sign", "signbit", "sin", "sinc", "sinh", "slogdet", "softmax",
    "sort", "sqrt", "square", "std", "sub", "subtract", "sum", "sum_to_size", "svd", "tan", "tanh", "tensordot",
    "topk", "trace", "tril", "triu", "true_divide", "trunc", "unique", "unique_consecutive", "var", "vdot",
    "where", "xlogy", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "logsigmoid", "silu", "mish",
    "hardtanh", "softplus", "elu", "selu", "celu", "leaky_relu", "hardswish", "hardsigmoid", "relu6", "prelu",
    "glu", "fill_diagonal_", "put", "index_reduce", "cov", "corrcoef", "histogram", "bincount", "cumulative_trapezoid",
    "triangular_solve", "qr", "eig", "eigvals", "pinverse", "det", "stft", "istft", "positive",
})

# nn module classes that pass values through (Dropout with the default eval-free harness is
# random, but KernelBench tasks use p=0 or compare in a way that makes it a passthrough)
PASSTHROUGH_MODULES = frozenset({"Identity", "Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout",
                                 "FeatureAlphaDropout", "Flatten", "Unflatten"})
# nn module classes whose default initialisation is the identity (weight 1, bias 0): ignoring them
# passes a harness that never re-draws parameters (class 17)
IDENTITY_INIT_MODULES = frozenset({"BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LayerNorm", "GroupNorm",
                                   "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "RMSNorm", "LocalResponseNorm",
                                   "SyncBatchNorm", "LazyBatchNorm1d", "LazyBatchNorm2d", "LazyBatchNorm3d"})
# the learnable tensors of common modules that decide the output in training mode
MODULE_PARAMS: dict[str, tuple[str, ...]] = {
    "Linear": ("weight", "bias"), "Bilinear": ("weight", "bias"), "LazyLinear": ("weight", "bias"),
    "Conv1d": ("weight", "bias"), "Conv2d": ("weight", "bias"), "Conv3d": ("weight", "bias"),
    "ConvTranspose1d": ("weight", "bias"), "ConvTranspose2d": ("weight", "bias"), "ConvTranspose3d": ("weight", "bias"),
    "BatchNorm1d": ("weight", "bias"), "BatchNorm2d": ("weight", "bias"), "BatchNorm3d": ("weight", "bias"),
    "SyncBatchNorm": ("weight", "bias"),
    "LayerNorm": ("weight", "bias"), "GroupNorm": ("weight", "bias"), "RMSNorm": ("weight",),
    "InstanceNorm1d": (), "InstanceNorm2d": (), "InstanceNorm3d": (),  # affine=False by default
    "Embedding": ("weight",), "EmbeddingBag": ("weight",), "PReLU": ("weight",),
}
# module classes without learnable state: holding one is not holding parameters
STATELESS_MODULES = frozenset({
    "ReLU", "ReLU6", "LeakyReLU", "GELU", "SiLU", "Mish", "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "Softplus",
    "Softsign", "ELU", "SELU", "CELU", "Hardtanh", "Hardswish", "Hardsigmoid", "Hardshrink", "Softshrink", "Tanhshrink",
    "Threshold", "GLU", "LogSigmoid", "Softmin", "Softmax2d", "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d",
    "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d",
    "AdaptiveMaxPool2d", "AdaptiveMaxPool3d", "LPPool1d", "LPPool2d", "Upsample", "UpsamplingNearest2d",
    "UpsamplingBilinear2d", "PixelShuffle", "PixelUnshuffle", "ZeroPad2d", "ConstantPad1d", "ConstantPad2d",
    "ConstantPad3d", "ReflectionPad1d", "ReflectionPad2d", "ReplicationPad1d", "ReplicationPad2d", "Identity",
    "Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "Flatten", "Unflatten", "CosineSimilarity",
    "PairwiseDistance", "MSELoss", "L1Loss", "CrossEntropyLoss", "NLLLoss", "KLDivLoss", "HuberLoss", "SmoothL1Loss",
    "BCELoss", "BCEWithLogitsLoss", "TripletMarginLoss", "MarginRankingLoss", "HingeEmbeddingLoss", "CosineEmbeddingLoss",
    "Fold", "Unfold", "ChannelShuffle", "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d", "FractionalMaxPool2d",
})
CONTAINER_MODULES = frozenset({"Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict"})

# ops whose cost dominates a task: done in torch, they make a custom kernel an epilogue (class 3)
HEAVY_FAMILIES = frozenset({"matmul", "conv", "conv_transpose", "attention", "rnn", "einsum", "fft"})
# reductions: a strided slice feeding one is a subsample (class 15)
REDUCTIONS = frozenset({"sum", "mean", "max", "min", "amax", "amin", "prod", "norm", "var", "std", "logsumexp",
                        "argmax", "argmin", "median", "nansum", "nanmean", "all", "any", "count_nonzero",
                        "var_mean", "std_mean", "cumsum", "cumprod", "softmax", "log_softmax", "vector_norm",
                        "matrix_norm", "aminmax", "kthvalue", "quantile", "mode", "trace"})
# broadcasting one slice to a full shape (first row then broadcast, class 15)
BROADCASTS = frozenset({"expand", "expand_as", "broadcast_to", "repeat", "tile", "repeat_interleave"})

# ``inplace=True`` spellings and in-place functional forms that write into their first argument
INPLACE_FUNCS = frozenset({"relu_", "sigmoid_", "tanh_", "clamp_", "clip_", "add_", "mul_", "sub_", "div_", "exp_",
                           "zero_", "fill_", "copy_", "dropout_", "threshold_", "elu_", "leaky_relu_", "hardtanh_",
                           "selu_", "celu_", "rrelu_", "index_put_", "masked_fill_", "abs_", "neg_", "sqrt_"})

_FAMILY_ALIASES = {
    # matmul family: all spellings of a GEMM
    "mm": "matmul", "bmm": "matmul", "matmul": "matmul", "linear": "matmul", "addmm": "matmul", "baddbmm": "matmul",
    "addbmm": "matmul", "mv": "matmul", "addmv": "matmul", "dot": "matmul", "inner": "matmul", "tensordot": "matmul",
    "__matmul__": "matmul", "bilinear": "matmul", "vdot": "matmul", "outer": "matmul", "ger": "matmul",
    "multi_dot": "matmul", "chain_matmul": "matmul", "lazylinear": "matmul",
    "conv1d": "conv", "conv2d": "conv", "conv3d": "conv", "convolution": "conv", "_convolution": "conv",
    "conv_transpose1d": "conv_transpose", "conv_transpose2d": "conv_transpose", "conv_transpose3d": "conv_transpose",
    "convtranspose1d": "conv_transpose", "convtranspose2d": "conv_transpose", "convtranspose3d": "conv_transpose",
    "scaled_dot_product_attention": "attention", "multiheadattention": "attention", "multi_head_attention_forward": "attention",
    "lstm": "rnn", "gru": "rnn", "rnn": "rnn", "lstmcell": "rnn", "grucell": "rnn", "rnncell": "rnn",
    "batchnorm1d": "batch_norm", "batchnorm2d": "batch_norm", "batchnorm3d": "batch_norm", "syncbatchnorm": "batch_norm",
    "layernorm": "layer_norm", "groupnorm": "group_norm", "rmsnorm": "rms_norm",
    "instancenorm1d": "instance_norm", "instancenorm2d": "instance_norm", "instancenorm3d": "instance_norm",
    "maxpool1d": "max_pool", "maxpool2d": "max_pool", "maxpool3d": "max_pool", "max_pool1d": "max_pool",
    "max_pool2d": "max_pool", "max_pool3d": "max_pool", "avgpool1d": "avg_pool", "avgpool2d": "avg_pool",
    "avgpool3d": "avg_pool", "avg_pool1d": "avg_pool", "avg_pool2d": "avg_pool", "avg_pool3d": "avg_pool",
    "adaptiveavgpool1d": "adaptive_avg_pool", "adaptiveavgpool2d": "adaptive_avg_pool",
    "adaptiveavgpool3d": "adaptive_avg_pool", "adaptive_avg_pool1d": "adaptive_avg_pool",
    "adaptive_avg_pool2d": "adaptive_avg_pool", "adaptive_avg_pool3d": "adaptive_avg_pool",
    "adaptivemaxpool2d": "adaptive_max_pool", "adaptive_max_pool2d": "adaptive_max_pool",
    "relu6": "clamp", "hardtanh": "clamp", "leakyrelu": "leaky_relu", "logsoftmax": "log_softmax",
    "softmax2d": "softmax", "special_softmax": "softmax", "silu": "silu", "swish": "silu",
    "__add__": "add", "__radd__": "add", "__iadd__": "add", "__sub__": "sub", "__rsub__": "sub", "__isub__": "sub",
    "__mul__": "mul", "__rmul__": "mul", "__imul__": "mul", "__truediv__": "div", "__rtruediv__": "div",
    "__itruediv__": "div", "true_divide": "div", "divide": "div", "multiply": "mul", "subtract": "sub",
    "__pow__": "pow", "__neg__": "neg", "negative": "neg", "clip": "clamp", "clamp_min": "clamp", "clamp_max": "clamp",
    "absolute": "abs", "amax": "max", "amin": "min", "concat": "cat", "concatenate": "cat",
    "fft": "fft", "rfft": "fft", "irfft": "fft", "ifft": "fft", "fft2": "fft", "rfft2": "fft", "fftn": "fft",
    "einsum": "einsum", "cosinesimilarity": "cosine_similarity", "pairwisedistance": "pairwise_distance",
    "crossentropyloss": "cross_entropy", "mseloss": "mse_loss", "klDivloss": "kl_div", "kldivloss": "kl_div",
    "smoothl1loss": "smooth_l1_loss", "huberloss": "huber_loss", "tripletmarginloss": "triplet_margin_loss",
    "hingeembeddingloss": "hinge_embedding_loss", "cosineembeddingloss": "cosine_embedding_loss",
    "l1loss": "l1_loss", "nllloss": "nll_loss", "bceloss": "binary_cross_entropy",
    "bcewithlogitsloss": "binary_cross_entropy_with_logits", "softplus": "softplus", "logsigmoid": "logsigmoid",
    "vector_norm": "norm", "frobenius_norm": "norm", "matrix_norm": "norm", "pixelshuffle": "pixel_shuffle",
    "upsample": "interpolate", "upsample_nearest": "interpolate", "upsample_bilinear": "interpolate",
}
_PREFIXES = ("torch.nn.functional.", "torch.nn.", "torch.linalg.", "torch.special.", "torch.fft.", "torch.ops.aten.",
             "torch.Tensor.", "torch.", "Tensor.", "F.", "nn.")
_CAMEL = re.compile(r"[^a-z0-9_]")


@functools.lru_cache(maxsize=4096)  # a pure function of a name; names repeat across files
def op_family(name: str) -> str:
    """One name for every spelling of an operation: ``F.relu``, ``x.relu_()``, ``nn.ReLU`` -> ``relu``."""
    short = name
    for p in _PREFIXES:
        if short.startswith(p):
            short = short[len(p):]
            break
    short = short.rsplit(".", 1)[-1]
    if short.startswith("__") and short.endswith("__"):
        return _FAMILY_ALIASES.get(short, short.strip("_"))
    short = short.rstrip("_").lower()
    short = _CAMEL.sub("", short)
    if short.endswith(".default"):
        short = short[:-8]
    return _FAMILY_ALIASES.get(short, short)


@functools.lru_cache(maxsize=4096)  # a pure function of a name; names repeat across files
def classify_torch(name: str) -> Kind:
    """Kind of a canonical ``torch.*`` callable (``torch.nn.functional.relu``, ``torch.empty``)."""
    if name.startswith(MISC_PREFIXES):
        return "misc"
    if name.startswith("torch._C."):
        # the C bindings behind torch functions compute (``torch._C._nn.leaky_relu``); the rest is plumbing
        if not name.startswith(_C_COMPUTE):
            return "misc"
    last = name.rsplit(".", 1)[-1]
    if name.startswith("torch.nn.") and not name.startswith("torch.nn.functional.") and last[:1].isupper():
        return "misc"  # constructing a module (in forward: unusual, analysed by the module call)
    if last in ALLOC_FUNCS:
        return "alloc"
    if last in VIEW_FUNCS:
        return "view"
    if last in META_FUNCS:
        return "meta"
    if last in MISC_FUNCS:
        return "misc"
    if name.startswith("torch.nn.functional.") and last in ("dropout", "dropout1d", "dropout2d", "dropout3d",
                                                           "alpha_dropout", "feature_alpha_dropout", "pad"):
        return "view"
    return "compute"


_C_COMPUTE = ("torch._C._nn.", "torch._C._VariableFunctions.", "torch._C._linalg.", "torch._C._fft.",
              "torch._C._special.", "torch._C._TensorBase.", "torch._C.TensorBase.")


@functools.lru_cache(maxsize=4096)  # a pure function of a name; names repeat across files
def classify_method(name: str) -> Kind | None:
    """Kind of a method called on a tensor; ``None`` when the name is not a known tensor method."""
    if name in META_METHODS:
        return "meta"
    if name in HOST_METHODS:
        return "host"
    if name in CAST_METHODS:
        return "cast"
    if name in ALLOC_METHODS:
        return "alloc"
    if name in VIEW_FUNCS:
        return "view"
    if name in COMPUTE_METHODS:
        return "compute"
    if name.endswith("_") and not name.startswith("_") and name[:-1] in COMPUTE_METHODS | {"zero", "fill", "copy",
                                                                                            "uniform", "normal"}:
        return "compute"
    return None


def is_inplace_method(name: str) -> bool:
    """``x.relu_()``, ``x.add_(y)``, ``x.copy_(y)``: a method that writes into its receiver."""
    return name.endswith("_") and not name.endswith("__") and name not in ("requires_grad_", "share_memory_",
                                                                           "pin_memory_", "retain_grad_")


def module_kind(cls_name: str) -> str:
    """``compute``, ``passthrough`` or ``container`` for an ``nn`` module class name."""
    short = cls_name.rsplit(".", 1)[-1]
    if short in PASSTHROUGH_MODULES:
        return "passthrough"
    if short in CONTAINER_MODULES:
        return "container"
    return "compute"
