"""Data: load calibration and evaluation data, split and store it, preprocess images, shape what a model receives."""

from __future__ import annotations

from ortlab.data.dataset import pick_subset, random_dataset, split_dataset, stratified_sample
from ortlab.data.feeds import batch_inputs, check_fits, check_tensor_inputs, control_values
from ortlab.data.inputs import axis_label, infer_specs, parse_shape, resolve_feed, suggested_sizes
from ortlab.data.loaders import TEXT_EXTENSIONS, TOKENIZER_FILE
from ortlab.data.loaders import load_image_files, load_image_zip, load_path, load_tensor_file, load_text_file
from ortlab.data.preprocess import PRESETS, detect_preprocess, explain_preprocess, resolve_preprocess
from ortlab.data.preprocess import suggest_preset, tensor_preview
from ortlab.data.store import dataset_digest, read_about, write_about, write_dataset


class Data:
    """Loading, splitting, storing and preprocessing data sets, and the inputs a model is fed."""

    PREPROCESS_PRESETS = PRESETS
    TEXT_EXTENSIONS = TEXT_EXTENSIONS
    TOKENIZER_FILE = TOKENIZER_FILE

    load_path = staticmethod(load_path)
    load_image_files = staticmethod(load_image_files)
    load_image_zip = staticmethod(load_image_zip)
    load_tensor_file = staticmethod(load_tensor_file)
    load_text_file = staticmethod(load_text_file)
    random_dataset = staticmethod(random_dataset)
    split_dataset = staticmethod(split_dataset)
    pick_subset = staticmethod(pick_subset)
    stratified_sample = staticmethod(stratified_sample)
    write_dataset = staticmethod(write_dataset)
    dataset_digest = staticmethod(dataset_digest)
    read_about = staticmethod(read_about)
    write_about = staticmethod(write_about)
    batch_inputs = staticmethod(batch_inputs)
    check_fits = staticmethod(check_fits)
    check_tensor_inputs = staticmethod(check_tensor_inputs)
    control_values = staticmethod(control_values)
    infer_specs = staticmethod(infer_specs)
    parse_shape = staticmethod(parse_shape)
    resolve_feed = staticmethod(resolve_feed)
    axis_label = staticmethod(axis_label)
    suggested_sizes = staticmethod(suggested_sizes)
    detect_preprocess = staticmethod(detect_preprocess)
    explain_preprocess = staticmethod(explain_preprocess)
    resolve_preprocess = staticmethod(resolve_preprocess)
    suggest_preprocess_preset = staticmethod(suggest_preset)
    tensor_preview = staticmethod(tensor_preview)


data = Data()
