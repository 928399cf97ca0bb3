"""Per-token activation quantisation for a dynamically quantized ONNX model, so a text's vector does not depend on
what else is in its batch.

onnxruntime's `quantize_dynamic` puts a DynamicQuantizeLinear before each int8 matrix product; it computes ONE
scale and zero point over the whole activation tensor, i.e. over every token of every text of the batch (padding
included). A text embedded alone and in a batch then gets different vectors (cosine ~0.987), and what is found or
merged as a duplicate depends on what happened to be embedded alongside it.

`rewrite(model)` replaces each DynamicQuantizeLinear(x) -> (q, scale, zero_point) by standard ONNX ops that
quantize every token's activations (a row of the last axis) on their own, symmetrically:

    s = max(ReduceMax(Abs(x), axis=-1), tiny) / 127      one scale per token
    q = QuantizeLinear(x, s, 128)  (uint8, in 1..255)     per-axis, with x seen as a tokens x features matrix

and each `Mul(Cast(MatMulInteger(q, W, 128, W_zp)), Mul(scale, W_scale))` after it by
`MatMulIntegerToFloat(q, W, 1, W_scale, 128, W_zp) * s`: the same uint8 x int8 kernel as before (int8 x int8 has
no fast kernel on AVX2: 4x slower), and the per-token scale applied to the product's rows. A token's result then
depends on that token only: the same text gives the same vector alone or in any batch, bit for bit in our tests.
Per-token scales also follow each token's own range, so the vectors are closer to the float model's (mean cosine
0.9957 vs 0.9915 with one scale per batch, on 200 LoCoMo turns).

The per-token ops cost some time: three passes over each activation where onnxruntime fused the per-batch
quantisation into its matrix product (figures in embedder.py).

Run inside the preparation's child process (prepare.py); deterministic: the same model in gives the same bytes out.
"""

from __future__ import annotations

import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper

LEVELS = 127.0  # symmetric: round(x / s) lies in -127..127
OFFSET = 128  # stored as uint8 around this zero point


def _constants(graph: onnx.GraphProto) -> dict[str, str]:
    arrays = {
        "levels": np.array(LEVELS, dtype=np.float32),
        "tiny": np.array(1e-8, dtype=np.float32),  # an all-zero token: any scale, its values quantize to 0
        "centre": np.array([OFFSET], dtype=np.uint8),
        "one": np.array(1.0, dtype=np.float32),
        "flat": np.array([-1], dtype=np.int64),
    }
    graph.initializer.extend(numpy_helper.from_array(array, f"per_token_{key}") for key, array in arrays.items())
    return {key: f"per_token_{key}" for key in arrays}


def _per_token_nodes(node: onnx.NodeProto, const: dict[str, str], graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The nodes standing in for one DynamicQuantizeLinear; they write its three outputs under the same names.
    The activation is seen as a matrix of tokens x features, so QuantizeLinear can take one scale per row
    (per-axis, axis 0): three passes over the activation (Abs, ReduceMax, QuantizeLinear), the rest is per token
    (few nodes: each costs a few microseconds even on a one-text query)."""
    (x,) = node.input
    q, scale, zero_point = node.output
    p = f"{node.name}_per_token"
    graph.initializer.append(numpy_helper.from_array(np.array(OFFSET, dtype=np.uint8), zero_point))

    def op(kind: str, inputs: list[str], output: str, **attributes) -> onnx.NodeProto:
        return helper.make_node(kind, inputs, [output], name=f"{output}_by_{kind}", **attributes)

    return [
        op("Abs", [x], f"{p}_magnitude"),
        op("ReduceMax", [f"{p}_magnitude"], f"{p}_peak", axes=[-1], keepdims=1),
        op("Max", [f"{p}_peak", const["tiny"]], f"{p}_range"),
        op("Div", [f"{p}_range", const["levels"]], scale),  # [..., 1]: broadcast over a product's columns
        op("Reshape", [scale, const["flat"]], f"{p}_step"),
        op("Shape", [f"{p}_step"], f"{p}_tokens"),
        op("Expand", [const["centre"], f"{p}_tokens"], f"{p}_centres"),
        op("Flatten", [x], f"{p}_rows", axis=-1),
        op("QuantizeLinear", [f"{p}_rows", f"{p}_step", f"{p}_centres"], f"{p}_quantized", axis=0),
        op("Shape", [x], f"{p}_shape"),
        op("Reshape", [f"{p}_quantized", f"{p}_shape"], q),
    ]


def _fuse_products(nodes: list[onnx.NodeProto], scales: set[str], one: str) -> list[onnx.NodeProto]:
    """Each `Mul(Cast(MatMulInteger(q, W, zp, W_zp)), Mul(scale, W_scale))` quantize_dynamic wrote becomes
    `MatMulIntegerToFloat(q, W, 1, W_scale, zp, W_zp) * scale`: onnxruntime's fused int8 kernel (what its
    optimizer would make of the pattern, reading the activation scale as ONE number, so a per-token scale must stay
    outside it), then the per-token scale broadcast over the output columns."""
    made = {name: node for node in nodes for name in node.output}
    users: dict[str, list[onnx.NodeProto]] = {}
    for node in nodes:
        for name in node.input:
            users.setdefault(name, []).append(node)
    gone: set[int] = set()
    instead: dict[int, list[onnx.NodeProto]] = {}
    for combine in nodes:
        if combine.op_type != "Mul" or not scales.intersection(combine.input):
            continue
        (scale,) = scales.intersection(combine.input)
        weight_scale = next(name for name in combine.input if name != scale)
        for product in users[combine.output[0]]:
            cast = made[next(name for name in product.input if name != combine.output[0])]
            integer = made[cast.input[0]]
            if (product.op_type, cast.op_type, integer.op_type) != ("Mul", "Cast", "MatMulInteger"):
                raise ValueError(f"{product.name}: not the MatMulInteger -> Cast -> Mul that quantize_dynamic writes")
            q, weights, zero_point, weight_zero_point = integer.input
            unscaled = f"{product.output[0]}_per_token_unscaled"
            instead[id(product)] = [
                helper.make_node("MatMulIntegerToFloat", [q, weights, one, weight_scale, zero_point, weight_zero_point],
                                 [unscaled], name=f"{integer.name}_per_token", domain="com.microsoft"),
                helper.make_node("Mul", [unscaled, scale], [product.output[0]], name=f"{product.name}_per_token"),
            ]
            gone.update((id(cast), id(integer)))
        gone.add(id(combine))
    ordered = []
    for node in nodes:
        if id(node) in instead:
            ordered.extend(instead[id(node)])
        elif id(node) not in gone:
            ordered.append(node)
    return ordered


def rewrite(model: onnx.ModelProto) -> int:
    """Replace every DynamicQuantizeLinear of `model` (in place) by per-token quantisation; returns how many."""
    graph = model.graph
    if not any(node.op_type == "DynamicQuantizeLinear" for node in graph.node):
        return 0
    const = _constants(graph)
    nodes, replaced = [], set()
    for node in graph.node:
        if node.op_type == "DynamicQuantizeLinear" and node.domain in ("", "ai.onnx"):
            nodes.extend(_per_token_nodes(node, const, graph))
            replaced.update(node.output)
        else:
            nodes.append(node)
    nodes = _fuse_products(nodes, {node.output[1] for node in graph.node if node.op_type == "DynamicQuantizeLinear"},
                           const["one"])
    del graph.node[:]
    graph.node.extend(nodes)
    kept = [info for info in graph.value_info if info.name not in replaced]
    del graph.value_info[:]
    graph.value_info.extend(kept)  # shapes of the replaced outputs changed: let onnxruntime infer them again
    onnx.checker.check_model(model)
    return len(replaced) // 3


if __name__ == "__main__":  # python -m persmem_memory_hnsw.embedding.per_token IN OUT
    source, target = sys.argv[1:3]
    loaded = onnx.load(source)
    rewrite(loaded)
    onnx.save(loaded, target)
