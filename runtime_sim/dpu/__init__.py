"""DPU numerics: layouts, views and generalized convolution as GEMM, plus the op set.

See conv.py for the GEMM formulation (after the GPU conv kernel generator seed),
view.py for index expressions and padding masks, layout.py for blocked formats,
ops.py for what the simulator calls per DPU variant and integer.py for the integer mode
(exact int32 sums, the PPE's requantization).
"""

from .conv import ConvProblem, OutputRegion, conv_forward, make_problem
from .conv_backward import conv_backward_bias, conv_backward_data, conv_backward_weights
from .layout import Block, Layout, from_layout, to_layout
from .numerics import PostOp, apply_post_op, resolve_dtype, round_to
from .ops import (Variant, add, avgpool, conv2d, depthwise_conv2d, full_variant, macs, matmul, maxpool, mul,
                  permute, split_output)
from .view import IndexExpr, View, ViewDim

__all__ = [
    "Block", "ConvProblem", "IndexExpr", "Layout", "OutputRegion", "PostOp", "Variant", "View", "ViewDim",
    "add", "apply_post_op", "avgpool", "conv2d", "conv_backward_bias", "conv_backward_data",
    "conv_backward_weights", "conv_forward", "depthwise_conv2d", "from_layout", "full_variant", "macs",
    "make_problem", "matmul", "maxpool", "mul", "permute", "resolve_dtype", "round_to", "split_output", "to_layout",
]
