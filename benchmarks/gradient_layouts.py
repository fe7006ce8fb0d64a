"""Build the gradient layouts shipped in ``workbench/assets/gradients`` from ``tf.keras.applications``.

Each model is built here with ``weights=None`` (nothing is downloaded) and its gradient tensors written in
backprop order with their bytes and the backward work before each (``workbench.gradients``). Run after a
TensorFlow upgrade: ``python benchmarks/gradient_layouts.py [NAME ...]``.
"""

from __future__ import annotations

import json
import sys

from workbench.gradients import APPLICATIONS, SHIPPED, application_layout, layout_mapping

#: The models the published-results check uses, and the commonest baseline.
DEFAULT_MODELS = ("resnet50", "resnet101", "inception_v3", "vgg16")


def main(names: list[str]) -> int:
    SHIPPED.mkdir(parents=True, exist_ok=True)
    for name in names or DEFAULT_MODELS:
        if name not in APPLICATIONS:
            print(f"{name}: not one of {', '.join(APPLICATIONS)}", file=sys.stderr)
            return 2
        layout = application_layout(name)
        path = SHIPPED / f"{name}.json"
        path.write_text(json.dumps(layout_mapping(layout, model=name), indent=0) + "\n")
        print(f"{path}: {layout.describe()}; forward {layout.forward_flops / 1e9:.3g} GFLOPs per sample")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
