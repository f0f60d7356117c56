"""Models: inspect one, import one, compare two graphs, and the bundled sample models."""

from __future__ import annotations

from ortlab.data.samples import (
    default_sample, find_by_path, find_by_sha256, find_for_model, get_sample, list_samples, samples_root,
)
from ortlab.model.diff_view import carry_values, map_node_names
from ortlab.model.inspect import external_data_files, inspect_model, op_key, sha256_file_cached
from ortlab.model.isolated import graph_description, graph_diff, import_model, import_upload, model_info
from ortlab.model.isolated import inspect_model as inspect_in_child
from ortlab.model.node_names import check_node_names
from ortlab.model.patterns import is_encoder_file
from ortlab.runs.artifact import artifact_sample


class Models:
    """Inspecting, importing and comparing model files, and finding the bundled samples."""

    inspect_model = staticmethod(inspect_model)
    inspect_in_child = staticmethod(inspect_in_child)
    model_info = staticmethod(model_info)
    import_model = staticmethod(import_model)
    import_upload = staticmethod(import_upload)
    external_data_files = staticmethod(external_data_files)
    sha256_file_cached = staticmethod(sha256_file_cached)
    op_key = staticmethod(op_key)
    is_encoder_file = staticmethod(is_encoder_file)
    check_node_names = staticmethod(check_node_names)
    graph_diff = staticmethod(graph_diff)
    graph_description = staticmethod(graph_description)
    map_node_names = staticmethod(map_node_names)
    carry_values = staticmethod(carry_values)
    list_samples = staticmethod(list_samples)
    get_sample = staticmethod(get_sample)
    default_sample = staticmethod(default_sample)
    find_by_path = staticmethod(find_by_path)
    find_by_sha256 = staticmethod(find_by_sha256)
    find_for_model = staticmethod(find_for_model)
    samples_root = staticmethod(samples_root)
    artifact_sample = staticmethod(artifact_sample)


models = Models()
