"""The checks of bench/efficacy_real.py: what a user wants from a chat answer, decided from its text alone.

One file, two uses: the benchmark copies it into its project as `evaluators/answer_check.py`, where each canary
task runs it as its check (`"$REEF_PYTHON" "$REEF_SUITE_DIR/evaluators/answer_check.py" KIND`, reading the agent's
`answer.txt`), and its scripted user imports it to decide whether to complain. Stdlib only.

Kinds:
  spanish   the answer is in Spanish: more Spanish than English function words (or Spanish punctuation/accents),
            at least two Spanish cues
  persona   the answer gives the assistant's name, Coral
  short     the answer has fewer than ten words
  ok        the answer starts with "OK:" (the rule the issue measured a 135M model not to follow)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

PERSONA = "Coral"
MAX_WORDS = 10  # "under ten words": fewer than this many
_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?", re.U)
SPANISH = frozenset("""el la los las es son de del que y en un una unos unas por con para se su sus al lo como más
pero muy sin sobre también hay donde está están tiene tienen puede pueden yo tú usted mi soy eres este esta estos
estas ese esa eso hola gracias qué cuál cómo dónde cuando cuándo porque sí agua mundo ciudad color grande pequeño
tres cuatro dos cinco siete días semana""".split())
ENGLISH = frozenset("""the is are of and to in a an that it for with as was on be this by you your i my what which
can has have from or at its they their there here am do does not hello thank color big small three four two five
seven days week water world city""".split())
_ES_MARKS = re.compile(r"[ñ¿¡áéíóú]", re.I)


def words(text: str) -> list[str]:
    return _WORD.findall(text)


def is_spanish(text: str) -> bool:
    ws = [w.lower() for w in words(text)]
    es = sum(1 for w in ws if w in SPANISH) + len(_ES_MARKS.findall(text))
    en = sum(1 for w in ws if w in ENGLISH)
    return es >= 2 and es > en


def check(kind: str, answer: str) -> bool:
    answer = answer.strip()
    if kind == "spanish":
        return is_spanish(answer)
    if kind == "persona":
        return PERSONA.lower() in answer.lower()
    if kind == "short":
        return 0 < len(words(answer)) < MAX_WORDS
    if kind == "ok":
        return answer.startswith("OK:")
    raise ValueError(f"unknown check kind {kind!r}")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: answer_check.py spanish|persona|short|ok  (reads answer.txt)", file=sys.stderr)
        return 2
    path = Path("answer.txt")
    answer = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
    ok = check(argv[0], answer)
    print(f"score: {1.0 if ok else 0.0}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
