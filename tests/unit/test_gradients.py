"""A model's gradients in backprop order (``workbench.gradients``): a small Keras model counted by hand,
the shipped layouts against Keras' own parameter counts, and the files users give."""

from __future__ import annotations

import json

import pytest

from workbench.gradients import gradient_layout, keras_gradient_layout, layout_mapping, read_layout_file, shipped_models

#: Trainable parameters of the Keras applications (tf.keras 2.15 ``count_params`` of the trainable weights).
KERAS_TRAINABLE = {
    "resnet50": 25_583_592,
    "resnet101": 44_601_832,
    "resnet152": 60_268_520,
    "inception_v3": 23_817_352,
    "vgg16": 138_357_544,
}


def test_a_small_model_is_laid_out_last_layer_first_ready_as_its_work_is_done(tmp_path):
    import tensorflow as tf

    inputs = tf.keras.Input((8, 8, 3))
    x = tf.keras.layers.Conv2D(4, 3, padding="same", name="conv")(inputs)
    x = tf.keras.layers.Flatten(name="flat")(x)
    outputs = tf.keras.layers.Dense(10, name="dense")(x)
    layout = keras_gradient_layout(tf.keras.Model(inputs, outputs, name="small"))
    # backprop order: the dense layer's bias and kernel, then the convolution's
    assert [name.split(":")[0] for name in layout.names] == ["dense/bias", "dense/kernel", "conv/bias", "conv/kernel"]
    assert layout.tensor_bytes.tolist() == [40, 256 * 10 * 4, 16, 3 * 3 * 3 * 4 * 4]
    # per sample: dense 2 x 256 x 10 = 5120; flatten touches 256 values; conv 2 x (8 x 8 x 4) x (3 x 3 x 3) = 13824
    assert layout.forward_flops == 5120 + 256 + 13824
    assert layout.ready_share.tolist() == pytest.approx([5120 / 19200, 5120 / 19200, 1.0, 1.0])
    # written and read back: the same layout
    path = tmp_path / "small.json"
    path.write_text(json.dumps(layout_mapping(layout, model="small")))
    again = read_layout_file(path)
    assert again.tensor_bytes.tolist() == layout.tensor_bytes.tolist()
    assert again.ready_share.tolist() == pytest.approx(layout.ready_share.tolist())


def test_the_shipped_layouts_hold_every_trainable_parameter_keras_counts():
    assert set(KERAS_TRAINABLE) <= set(shipped_models())
    for name, parameters in KERAS_TRAINABLE.items():
        layout = gradient_layout(name)
        assert layout.total_bytes == 4 * parameters, name
        assert layout.ready_share[-1] == pytest.approx(1.0) and layout.names[0].startswith("predictions/")
    # VGG-16's dense layers (120 M of its 138 M parameters) come first in backprop, and are cheap to reach
    vgg = gradient_layout("vgg16")
    assert vgg.tensor_bytes[:6].sum() / vgg.total_bytes > 0.85 and vgg.ready_share[5] < 0.01


def test_a_file_that_is_no_layout_is_one_clear_error(tmp_path):
    with pytest.raises(ValueError, match="no such model or file"):
        gradient_layout("resnet-9000")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="cannot be read as JSON"):
        read_layout_file(bad)
    listed = tmp_path / "list.json"
    tensors = [{"name": "fc", "parameters": 1000, "flops": 2000}, {"name": "conv", "parameters": 10}]
    listed.write_text(json.dumps(tensors))
    layout = read_layout_file(listed)
    assert layout.total_bytes == 4040 and layout.notes  # the FLOPs of one tensor were missing: said
