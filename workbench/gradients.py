"""A model's gradient tensors in backprop order, read off its Keras layers: what Horovod's overlap needs.

Horovod hides the allreduce behind the backward pass only as far as gradients are ready early: the last
layers' gradients come first, so a model whose bytes sit at its top (VGG-16's dense layers: 120 M of its
138 M parameters) can send most of them while its convolutions still compute, and one whose bytes sit at
its bottom cannot. ``keras_gradient_layout`` walks a built Keras model's layers backwards, gives each
trainable variable its bytes and, as the time it is ready, the backward work done by then (each layer's
forward arithmetic per sample: a layer's backward pass does about twice it, so the shares are the same).

The projection (``analysis.projection.GradientLayout``) reads the result; ``gradient_layout(name)``
returns a shipped layout of a well-known model (``workbench/assets/gradients``, built by
``benchmarks/gradient_layouts.py`` from ``tf.keras.applications`` with ``weights=None``: nothing is
downloaded), a user's JSON file, or builds a Keras application on the spot.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from workbench.analysis.projection import GradientLayout

#: Layouts shipped with the package, one JSON file per model (``NAME.json``).
SHIPPED = Path(__file__).parent / "assets" / "gradients"
#: Keras application classes by the names ``--model`` takes.
APPLICATIONS = {
    "resnet50": "ResNet50",
    "resnet101": "ResNet101",
    "resnet152": "ResNet152",
    "inception_v3": "InceptionV3",
    "vgg16": "VGG16",
    "vgg19": "VGG19",
    "mobilenet_v2": "MobileNetV2",
    "densenet121": "DenseNet121",
    "xception": "Xception",
}
#: Arithmetic per output element of layers that only touch each element a few times (normalisation).
NORMALISATION_FLOPS_PER_ELEMENT = 4


def _elements(shape: Any) -> int:
    """Values per sample of a tensor shape (the batch dimension left out)."""
    dims = [int(d) for d in tuple(shape)[1:] if d is not None]
    return math.prod(dims) if dims else 1


def _first_shape(tensor: Any) -> Any:
    return (tensor[0] if isinstance(tensor, (list, tuple)) else tensor).shape


def layer_flops(layer: Any) -> float:
    """Forward arithmetic of one sample through ``layer`` (a multiply-add counts 2), from its shapes."""
    kind = type(layer).__name__
    if kind == "InputLayer":
        return 0.0
    try:
        out = _elements(_first_shape(layer.output))
        inputs = _first_shape(layer.input)
    except (AttributeError, ValueError):  # a layer never called in a graph (no shapes): no arithmetic known
        return 0.0
    channels = int(inputs[-1]) if len(inputs) > 1 and inputs[-1] is not None else 1
    if kind in ("DepthwiseConv2D", "DepthwiseConv1D"):
        return 2.0 * out * math.prod(layer.kernel_size)
    if kind.startswith("SeparableConv"):
        spatial = out // max(int(layer.filters), 1)
        return 2.0 * spatial * channels * (math.prod(layer.kernel_size) + int(layer.filters))
    if kind.startswith("Conv"):  # Conv1D/2D/3D and their transposes: each output sums kernel x input channels
        groups = int(getattr(layer, "groups", 1) or 1)
        return 2.0 * out * math.prod(layer.kernel_size) * channels / groups
    if kind == "Dense":
        return 2.0 * out * channels
    if "Normalization" in kind:
        return float(NORMALISATION_FLOPS_PER_ELEMENT * out)
    return float(out)


def _leaf_layers(model: Any) -> Iterator[Any]:
    """Layers in forward order, nested models opened."""
    for layer in model.layers:
        if hasattr(layer, "layers") and layer.layers:
            yield from _leaf_layers(layer)
        else:
            yield layer


def keras_gradient_layout(model: Any, *, source: str = "") -> GradientLayout:
    """The gradient tensors of a built Keras model in backprop order, each ready once the backward work of its
    layer and every layer above it is done (layers without variables add their work to the next gradient)."""
    names: list[str] = []
    sizes: list[float] = []
    costs: list[float] = []
    pending = 0.0
    forward = 0.0
    for layer in reversed(list(_leaf_layers(model))):
        flops = layer_flops(layer)
        forward += flops
        pending += flops
        for index, variable in enumerate(reversed(layer.trainable_weights)):
            names.append(variable.name)
            sizes.append(float(variable.shape.num_elements() * variable.dtype.size))
            costs.append(pending if index == 0 else 0.0)
            pending = 0.0
    if not names:
        raise ValueError(f"{model.name}: no trainable variables, so no gradients to reduce")
    costs[-1] += pending  # work below the first layer with variables ends the backward pass
    return GradientLayout.from_costs(
        names, sizes, costs, source=source or f"Keras model {model.name}", forward_flops=forward
    )


def application_layout(name: str) -> GradientLayout:
    """The layout of a ``tf.keras.applications`` model built here without weights (TensorFlow needed)."""
    import tensorflow as tf

    builder = getattr(tf.keras.applications, APPLICATIONS[name])
    model = builder(weights=None)
    layout = keras_gradient_layout(model, source=f"tf.keras.applications.{APPLICATIONS[name]}(weights=None)")
    tf.keras.backend.clear_session()
    return layout


def layout_mapping(layout: GradientLayout, *, model: str = "") -> dict[str, Any]:
    """A layout as a JSON-ready mapping (``GradientLayout.from_mapping`` reads it back): tensors in backprop
    order with bytes and the backward work before each."""
    shares = [float(s) for s in layout.ready_share]
    costs = [b - a for a, b in zip([0.0, *shares[:-1]], shares)]
    scale = layout.forward_flops or 1.0
    return {
        "model": model,
        "source": layout.source,
        "backward_share": layout.backward_share,
        "forward_flops": layout.forward_flops,
        "tensors": [
            {"name": name, "bytes": int(size), "flops": round(cost * scale, 1)}
            for name, size, cost in zip(layout.names, layout.tensor_bytes, costs)
        ],
    }


def read_layout_file(path: str | Path) -> GradientLayout:
    """A layout from a JSON file: ``{"tensors": [{"name", "bytes" or "parameters", "flops"}, ...]}`` in
    backprop order (the last layer's gradients first)."""
    file = Path(path)
    try:
        values = json.loads(file.read_text())
    except (OSError, ValueError) as error:
        raise ValueError(
            f'{path}: cannot be read as JSON ({error}); write {{"tensors": [{{"name", "parameters",'
            ' "flops"}, ...]}} in backprop order'
        ) from None
    if isinstance(values, list):
        values = {"tensors": values}
    return GradientLayout.from_mapping(values, source=str(values.get("source") or file.name))


def shipped_models() -> list[str]:
    return sorted(path.stem for path in SHIPPED.glob("*.json"))


def gradient_layout(name_or_path: str | Path) -> GradientLayout:
    """A shipped model's layout (``resnet101``), a Keras application built here, or a user's JSON file."""
    text = str(name_or_path)
    shipped = SHIPPED / f"{text.lower()}.json"
    if shipped.is_file():
        return read_layout_file(shipped)
    if text.lower() in APPLICATIONS:
        return application_layout(text.lower())
    if Path(text).is_file():
        return read_layout_file(text)
    known = ", ".join(sorted({*shipped_models(), *APPLICATIONS}))
    raise ValueError(f"--model {text}: no such model or file; use one of {known}, or a JSON file of tensors")
