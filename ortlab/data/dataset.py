"""A dataset of calibration or evaluation samples (images, tensors, text or random), its subsets and splits."""

from __future__ import annotations

import io
from dataclasses import dataclass, field, replace
from typing import Any
from collections.abc import Mapping, Sequence

import numpy as np
from PIL import Image, UnidentifiedImageError

from ortlab.core.errors import DataError
from ortlab.core import limits
from ortlab.core.text import one_line


@dataclass(frozen=True)
class Sample:
    """One item of a dataset. ``source`` is a file path, ``zip:member``, ``upload:name``, ``tensors:FILE``,
    ``text:FILE`` or ``random``; ``index`` is the row of a tensor, text or random sample (source and index
    together tell two files' samples apart, e.g. calibration from evaluation)."""

    name: str
    label: int | None
    source: str
    index: int | None = None

    @property
    def row(self) -> int:
        """The row of a tensor, text or random sample (its ``index``); an image sample has none."""
        if self.index is None:
            raise DataError(f"Sample {self.name} is not a row of a tensor, text or random dataset.")
        return self.index


@dataclass
class Dataset:
    """Samples of one kind ("images", "tensors", "text" or "random"); labels index ``class_names``. Text
    datasets hold one line per sample, the tokenizer (``tokenizer.json`` text) and the sequence length
    (None: the model's fixed length, else :data:`ortlab.data.inputs.DEFAULT_SEQ_LEN`)."""

    kind: str
    samples: list[Sample]
    class_names: list[str] = field(default_factory=list)
    is_random: bool = False
    seed: int = 0
    _blobs: dict[str, bytes] = field(default_factory=dict, repr=False)  # in-memory image bytes by source
    _tensors: dict[str, np.ndarray] = field(default_factory=dict, repr=False)  # key "" = the single .npy
    seq_len: int | None = None
    _texts: list[str] = field(default_factory=list, repr=False)
    _tokenizer_json: str = field(default="", repr=False)
    _encoded: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)
    population: int = 0  # the samples of the dataset this one is a subset of (0: not a subset)
    control: dict[str, float] = field(default_factory=dict)  # random data: control inputs' values (--input-value)

    @property
    def tensors(self) -> dict[str, np.ndarray]:
        """A tensor data set's arrays by input name (key ``""``: the single array of a .npy file); read, never changed."""
        return self._tensors

    @property
    def texts(self) -> list[str]:
        """A text data set's lines, one per sample (``Sample.index`` points into it)."""
        return self._texts

    @property
    def tokenizer_json(self) -> str:
        """A text data set's ``tokenizer.json`` text."""
        return self._tokenizer_json

    def blob(self, source: str) -> bytes | None:
        """An image sample's bytes when the data set holds them in memory (an upload); None when they are in its file."""
        return self._blobs.get(source)

    def labeled(self) -> bool:
        """True when every sample has a label."""
        return bool(self.samples) and all(s.label is not None for s in self.samples)

    def __len__(self) -> int:
        return len(self.samples)

    def subset(self, indices: Sequence[int]) -> Dataset:
        """A dataset with the samples at ``indices`` (sharing the loaded bytes/tensors)."""
        return replace(self, samples=[self.samples[i] for i in indices], population=self.population or len(self))

    def load_image(self, i: int, max_side: int | None = None) -> Image.Image:
        """Open sample ``i`` as a PIL image (images only). Its size is checked from the header before it is
        decoded (``limits.IMAGE_MAX_PIXELS``). With ``max_side`` the image is decoded reduced (JPEG draft
        mode) and shrunk to fit ``max_side`` × ``max_side``: a preview never holds the full image."""
        if self.kind != "images":
            raise DataError(f"Sample {i} is {self.kind}, not an image.")
        s = self.samples[i]
        try:
            if s.source in self._blobs:
                img = Image.open(io.BytesIO(self._blobs[s.source]))
            else:
                img = Image.open(s.source)
            check_image_pixels(img.size, s.name)
            if max_side is not None:
                img.draft("RGB" if img.mode not in ("L", "1") else "L", (max_side, max_side))
                img.thumbnail((max_side, max_side))
            img.load()
        except (OSError, UnidentifiedImageError, ValueError, Image.DecompressionBombError) as exc:
            raise DataError(f"Cannot read image {s.name}: {one_line(exc)}.") from None
        return img

    def load_preview(self, i: int, max_side: int | None = None) -> Image.Image:
        """Sample ``i`` reduced to at most ``max_side`` (default ``limits.PREVIEW_MAX_SIDE``) on its longest
        side, decoded reduced where the format allows it."""
        return self.load_image(i, max_side=int(max_side or limits.limit("PREVIEW_MAX_SIDE")))

    def encoded(self, length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(input_ids, attention_mask, token_type_ids) of every line, padded/truncated to ``length`` (int64)."""
        if self.kind != "text":
            raise DataError(f"This dataset holds {self.kind}, not text.")
        if length not in self._encoded:
            self._encoded[length] = _tokenize(self._tokenizer_json, self._texts, length)
        return self._encoded[length]


def check_image_pixels(size: tuple[int, int], name: str) -> None:
    """Raise DataError when an image of ``size`` (width, height, from its header) has more pixels than
    ``limits.IMAGE_MAX_PIXELS``: such an image is refused before it is decoded."""
    cap = int(limits.limit("IMAGE_MAX_PIXELS"))
    w, h = size
    if w * h > cap:
        raise DataError(f"Image {name} is {w}×{h} ({w * h / 1e6:.0f} megapixels, about "
                        f"{limits.gb(w * h * 3)} decoded); at most {cap / 1e6:g} megapixels are accepted "
                        f"(image pixel limit, {limits.env_name('IMAGE_MAX_PIXELS')}). Resize the images "
                        f"(the model sees them at a few hundred pixels anyway) and load them again.")

def load_tokenizer(text: str, label: str):
    """A ``tokenizers.Tokenizer`` from ``tokenizer.json`` text; DataError naming ``label`` when it is not one."""
    try:
        from tokenizers import Tokenizer
    except ImportError:  # pragma: no cover - a dependency in requirements.txt
        raise DataError("Text data needs the 'tokenizers' package (pip install tokenizers).") from None
    try:
        return Tokenizer.from_str(text)
    except Exception as exc:  # the tokenizers library raises a plain Exception for a malformed file
        raise DataError(f"{label} is not a Hugging Face tokenizer.json ({one_line(exc)}).") from None


def _tokenize(tokenizer_json: str, texts: Sequence[str], length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Token ids, attention mask and token-type ids of ``texts`` padded/truncated to ``length``."""
    tok = load_tokenizer(tokenizer_json, "The tokenizer")
    pad = tok.padding or {}
    pad_id, pad_token = pad.get("pad_id"), pad.get("pad_token")
    if pad_id is None or pad_token is None:
        for cand in ("[PAD]", "<pad>", "<|pad|>", "<PAD>", "[pad]"):
            if tok.token_to_id(cand) is not None:
                pad_id, pad_token = tok.token_to_id(cand), cand
                break
        else:
            pad_id, pad_token = 0, tok.id_to_token(0) or "[PAD]"
    tok.enable_truncation(max_length=int(length))
    tok.enable_padding(length=int(length), pad_id=int(pad_id), pad_token=str(pad_token))
    enc = tok.encode_batch(list(texts))
    ids = np.asarray([e.ids for e in enc], dtype=np.int64).reshape(len(enc), int(length))
    mask = np.asarray([e.attention_mask for e in enc], dtype=np.int64).reshape(len(enc), int(length))
    types = np.asarray([e.type_ids for e in enc], dtype=np.int64).reshape(len(enc), int(length))
    return ids, mask, types

def random_dataset(n: int, seed: int = 0, control: Mapping[str, float] | None = None) -> Dataset:
    """``n`` random samples shaped after the model's inputs; flagged ``is_random`` (results are meaningless).
    ``control``: the value each named control input (a sample rate, a flag) takes in every sample, as a person gave
    it: no value is made up for those (``inputs.is_control_input``)."""
    if n < 1:
        raise DataError(f"A random dataset needs at least 1 sample, got {n}.")
    return Dataset("random", [Sample(f"random_{i}", None, "random", i) for i in range(n)], [], True, seed,
                   control=dict(control or {}))


EVAL_SHARE = 3  # split_dataset: every third sample (of each class) is held out for evaluation


def split_dataset(ds: Dataset) -> tuple[Dataset, Dataset]:
    """Disjoint (calibration, evaluation) parts of ``ds``: every third sample of each class (of all samples when
    unlabeled), in order, is held out for evaluation, so evaluation never sees a calibration sample. A dataset of
    fewer than 3 samples cannot be split: both parts are all of it (the verdict then says it was evaluated on
    calibration samples)."""
    if len(ds) < EVAL_SHARE:
        return ds, ds
    seen: dict[Any, int] = {}
    cal: list[int] = []
    ev: list[int] = []
    for i, s in enumerate(ds.samples):
        k = seen.get(s.label, 0)
        seen[s.label] = k + 1
        (ev if k % EVAL_SHARE == EVAL_SHARE - 1 else cal).append(i)
    if not ev:
        return ds, ds
    return ds.subset(cal), ds.subset(ev)


def stratified_sample(ds: Dataset, n: int, seed: int = 0) -> Dataset:
    """Deterministically pick ``n`` samples, keeping the class balance when labeled (original order kept)."""
    if n < 1:
        raise DataError(f"Cannot sample {n} items; ask for at least 1.")
    if n >= len(ds):
        return ds.subset(range(len(ds)))
    rng = np.random.default_rng(seed)
    if not ds.labeled():
        return ds.subset(sorted(int(i) for i in rng.choice(len(ds), size=n, replace=False)))
    by_class: dict[int, list[int]] = {}
    for i, s in enumerate(ds.samples):
        by_class.setdefault(int(s.label or 0), []).append(i)  # labeled(): every label is set
    classes = sorted(by_class)
    quota = {c: n * len(by_class[c]) / len(ds) for c in classes}
    take = {c: int(quota[c]) for c in classes}
    leftover = n - sum(take.values())
    for c in sorted(classes, key=lambda c: (-(quota[c] - take[c]), c))[:leftover]:
        take[c] += 1
    chosen: list[int] = []
    for c in classes:
        members = by_class[c]
        chosen += [members[int(j)] for j in rng.permutation(len(members))[: take[c]]]
    return ds.subset(sorted(chosen))


def pick_subset(ds: Dataset, n: int | None, stratify: bool = True, seed: int = 0) -> Dataset:
    """``n`` samples of ``ds`` (all when ``n`` is None, 0 or at least its size): stratified by class, or drawn
    uniformly with ``seed``. The one rule the app's evaluation subset and the CLI's ``--verify-samples`` use."""
    if not n or n >= len(ds):
        return ds
    if stratify:
        return stratified_sample(ds, n, seed)
    rng = np.random.default_rng(seed)
    return ds.subset(sorted(int(i) for i in rng.choice(len(ds), size=n, replace=False)))
