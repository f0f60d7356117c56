"""Rebuild the real data that feeds the third-party-like fixtures in ``tests/fixtures/`` (see its README.md).

Needs numpy and the ``tokenizers`` library (both in requirements.txt), not torch::

    python scripts/build_fixture_data.py [CPYTHON_WAV]

* ``text_calibration.txt`` / ``text_evaluation.txt`` are written by hand (in this script); ``text_tokenizer.json``
  is a Hugging Face WordLevel tokenizer (lower-cased words) trained on both files ([CLS] … [SEP] around each line, [PAD] = 0), its
  vocabulary under the text encoder's 1000 ids.
* ``vad_calibration.npz`` / ``vad_evaluation.npz``: 256-sample frames (hop 64, even frames for calibration, odd
  ones for evaluation) of a real recording, CPython's ``Lib/test/audiodata/pluck-pcm32.wav`` (a plucked string,
  11025 Hz stereo 32-bit PCM, mixed to mono, PSF licence), with ``state`` zeros [2, 32] and ``sr`` 16000 per
  sample. Give the path of that file when the running Python does not ship its test data.
"""

from __future__ import annotations

import sys
import sysconfig
import wave
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
FRAME, HOP, STATE = 256, 64, (2, 32)

CALIBRATION = """\
The train to the coast leaves every morning at seven.
She planted tomatoes and basil along the south wall of the garden.
Our team reviewed the quarterly report before the meeting.
A small boat drifted slowly across the quiet lake.
The museum opens a new exhibition about ancient maps next week.
He forgot his umbrella on the bus again.
Fresh bread smells wonderful early in the morning.
The children built a castle out of wet sand.
Please send the invoice to the accounts department by Friday.
The mountain road was closed after the heavy snow.
My neighbour repairs old radios in his spare time.
The library keeps newspapers from the last hundred years.
A sudden storm knocked out the power in the village.
They painted the kitchen a pale shade of yellow.
The doctor recommended more sleep and less coffee.
Students gathered in the hall to hear the visiting author.
The river rose quickly after three days of rain.
We watched the sunset from the top of the old tower.
The new software update fixed the login problem.
Her grandmother taught her to knit warm winter scarves.
The bakery on the corner sells the best lemon cake in town.
A flock of geese flew south over the fields.
The engineer checked every bolt on the bridge.
Tickets for the concert sold out within an hour.
"""

EVALUATION = """\
The ferry to the island runs twice a day in summer.
He grows peppers and onions in a small greenhouse.
The committee discussed the budget for the coming year.
A canoe glided past the reeds near the shore.
The gallery will show paintings of northern harbours this autumn.
She left her keys at the office on Monday.
Warm soup is welcome on a cold evening.
The kids made a snowman in the front yard.
Kindly return the signed contract before the end of the month.
The pass was blocked by a rockslide overnight.
An old clockmaker fixes watches in the shop downstairs.
The archive holds letters written during the war.
Strong winds brought down several trees near the school.
We covered the bedroom walls in light blue paint.
The nurse advised drinking more water every day.
Visitors lined up outside the theatre before the show.
The lake froze early this winter.
From the hill we could see the whole city at night.
The latest version of the app loads much faster.
His uncle showed him how to carve wooden spoons.
The cafe near the station serves strong coffee and apple pie.
A line of ducks crossed the road near the pond.
The mechanic tested the brakes before the long drive.
Seats for the match were gone by noon.
"""


def build_text() -> None:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    (OUT / "text_calibration.txt").write_text(CALIBRATION, encoding="utf-8")
    (OUT / "text_evaluation.txt").write_text(EVALUATION, encoding="utf-8")
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator((CALIBRATION + EVALUATION).splitlines(),
                            trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]"]))
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]",
                                                       special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    assert tok.get_vocab_size() < 1000, tok.get_vocab_size()
    tok.save(str(OUT / "text_tokenizer.json"))
    print(f"text: {len(CALIBRATION.splitlines())} + {len(EVALUATION.splitlines())} lines, "
          f"vocabulary {tok.get_vocab_size()}")


def _pluck(path: Path | None) -> np.ndarray:
    path = path or Path(sysconfig.get_paths()["stdlib"]) / "test" / "audiodata" / "pluck-pcm32.wav"
    with wave.open(str(path)) as w:
        assert w.getsampwidth() == 4, w.getparams()
        raw = np.frombuffer(w.readframes(w.getnframes()), dtype="<i4").reshape(-1, w.getnchannels())
    return (raw.astype(np.float64).mean(axis=1) / 2**31).astype(np.float32)


def build_vad(path: Path | None = None) -> None:
    audio = _pluck(path)
    starts = range(0, audio.size - FRAME + 1, HOP)
    frames = np.stack([audio[i:i + FRAME] for i in starts])
    for name, part in (("calibration", frames[0::2]), ("evaluation", frames[1::2])):
        n = len(part)
        np.savez(OUT / f"vad_{name}.npz", input=part, state=np.zeros((n, *STATE), np.float32),
                 sr=np.full(n, 16000, np.int64))
        print(f"vad_{name}.npz: {n} frames of {FRAME} samples")


if __name__ == "__main__":
    build_text()
    build_vad(Path(sys.argv[1]) if len(sys.argv) > 1 else None)
