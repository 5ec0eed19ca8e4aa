"""Writes tests/data/grading_corpus.jsonl: answer-equivalence cases with a careful human verdict.

Golds are real benchmark answers from /work/shared/data (the ``source`` field names the file and
row); preds are written the way small models write answers, plus adversarial wrong ones.
``kind``: ``answer`` (graded with ``is_equivalent(pred, gold)``) or ``response`` (a whole model
response, graded with ``correctness_reward(pred, gold)``). Run: python tests/data/make_grading_corpus.py
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

DATA = Path("/work/shared/data")
OUT = Path(__file__).with_name("grading_corpus.jsonl")

T, F = True, False
# (category, gold, [(pred, verdict), ...]) ; kind "answer" unless the category ends with ":response"
CASES = [
    ("integer", "18", [("18", T), ("\\$18", T), ("18 dollars", T), ("18.00", T), ("x = 18", T),
                       ("\\text{18}", T), ("-18", F), ("18.5", F), ("180", F), ("1 8", T)]),
    ("integer", "70000", [("70,000", T), ("70{,}000", T), ("70\\,000", T), ("\\$70,000", T),
                          ("7 \\times 10^4", T), ("7e4", T), ("7000", F), ("70,000.01", F)]),
    ("integer", "25", [("025", T), ("\\boxed{25}", T), ("25.", T), ("**25**", T), ("25 \\text{ ways}", T),
                       ("\\frac{50}{2}", T), ("24", F), ("25\\%", T), ("2.5", F), ("5^2", T)]),
    ("integer", "204", [("204", T), ("$204$", T), ("m+n = 204", T), ("204^\\circ", T), ("402", F)]),
    ("integer", "-9", [("-9", T), ("\u22129", T), ("(-9)", T), ("9", F), ("x=-9", T), ("-9.0", T)]),
    ("integer", "0", [("0", T), ("0.0", T), ("-0", T), ("\\text{none}", F), ("O", F)]),
    ("integer", "1736", [("1,736", T), ("1736.", T), ("1737", F), ("1.736", F)]),
    ("integer", "8000", [("8,000", T), ("8 \\times 10^{3}", T), ("8\\cdot 10^3", T), ("800", F)]),
    ("fraction", "\\frac{1}{8}", [("0.125", T), ("1/8", T), ("\\dfrac{1}{8}", T), ("\\frac18", T),
                                  ("\\frac{2}{16}", T), ("0.1250", T), ("0.13", F), ("\\frac{1}{6}", F),
                                  ("12.5\\%", T), ("8", F)]),
    ("fraction", "\\frac{16}{5}", [("3.2", T), ("3\\frac{1}{5}", T), ("16/5", T), ("3 \\frac15", T),
                                   ("\\frac{5}{16}", F), ("3.25", F)]),
    ("fraction", "\\frac{639}{40}", [("15.975", T), ("15.98", F), ("15\\frac{39}{40}", T), ("\\frac{1278}{80}", T)]),
    ("fraction", "\\frac{3}{56}", [("0.0536", F), ("\\frac{6}{112}", T), ("3/56", T), ("\\tfrac{3}{56}", T)]),
    ("fraction", "\\dfrac{17}{50}", [("0.34", T), ("\\frac{17}{50}", T), ("34\\%", T), ("0.35", F)]),
    ("fraction", "\\frac 59", [("\\frac{5}{9}", T), ("5/9", T), ("0.556", F), ("0.\\overline{5}", T), ("\\frac{9}{5}", F)]),
    ("decimal", ".35625", [("0.35625", T), ("\\frac{57}{160}", T), ("0.356", F), ("0.35626", F)]),
    ("decimal", ".0000672", [("0.0000672", T), ("6.72 \\times 10^{-5}", T), ("6.72e-5", T), ("0.000067", F),
                             ("\\frac{42}{625000}", T)]),
    ("decimal", "326.5", [("326.50", T), ("326\\frac{1}{2}", T), ("\\frac{653}{2}", T), ("326", F), ("327", F)]),
    ("decimal", "8.18", [("8.180", T), ("8.2", F), ("\\frac{409}{50}", T)]),
    ("rounded-reference", "54.55", [("\\frac{600}{11}", T), ("54.55", T), ("54.54", F), ("54.5", F), ("55", F)]),
    ("rounded-reference", "3.14", [("\\pi", T), ("3.14", T), ("3.1", F), ("3.15", F), ("\\frac{22}{7}", T)]),  # 22/7 = 3.142857... rounds to 3.14
    ("rounded-reference", "22.21", [("22.210", T), ("22.2", F), ("22.22", F)]),
    ("exact-reference", "\\frac{1}{3}", [("0.3333333", F), ("0.333", F), ("0.\\overline{3}", T), ("\\frac{2}{6}", T),
                                         ("1/3", T), ("0.33", F),
                                         ("0.333...", T), ("0.33\\ldots", T)]),
    ("exact-reference", "\\pi", [("3.14159...", F), ("3.14", F), ("\\pi", T), ("\\frac{2\\pi}{2}", T)]),
    ("exact-reference", "\\frac{\\sqrt{21}}{5}", [("\\frac{1}{5}\\sqrt{21}", T), ("\\sqrt{21}/5", T),
                                                  ("\\sqrt{\\frac{21}{25}}", T), ("0.9165", F), ("0.916515", F),
                                                  ("\\frac{21}{5}", F), ("sqrt(21)/5", T)]),
    ("exact-reference", "\\sqrt{51}", [("51^{1/2}", T), ("7.14", F), ("7.1414284", F), ("\u221a51", T)]),
    ("exact-reference", "288 \\pi", [("288\\pi", T), ("\\pi \\cdot 288", T), ("288", F), ("904.78", F), ("288 pi", T)]),
    ("exact-reference", "18+2\\pi", [("2\\pi+18", T), ("2(9+\\pi)", T), ("24.28", F), ("20\\pi", F)]),
    ("exact-reference", "\\frac{20000}{\\pi}", [("20000/\\pi", T), ("\\frac{20000}{3.14}", F), ("6366.2", F)]),
    ("exact-reference", "\\sqrt[4]{8}", [("8^{1/4}", T), ("2^{3/4}", T), ("\\sqrt{2\\sqrt{2}}", T), ("1.68", F)]),
    ("percent", "20\\%", [("20", T), ("20\\%", T), ("20 percent", T), ("0.2", T), ("\\frac{1}{5}", T),
                          ("0.2\\%", F), ("2\\%", F), ("200\\%", F), ("20.0\\%", T)]),
    ("percent", "237.5\\%", [("237.5", T), ("2.375", T), ("237.5 \\%", T), ("2.375\\%", F), ("238\\%", F)]),
    ("percent", "32 \\%", [("32", T), ("32\\%", T), ("0.32", T), ("0.32\\%", F), ("3200\\%", F)]),
    ("percent", "52\\%", [("52\\text{ percent}", T), ("\\frac{13}{25}", T), ("0.52\\%", F), ("5200\\%", F), ("48\\%", F)]),
    ("units", "90^\\circ", [("90", T), ("90\u00b0", T), ("90 degrees", T), ("90^{\\circ}", T), ("\\frac{\\pi}{2}", F), ("45^\\circ", F)]),
    ("units", "145^\\circ", [("145", T), ("145^\\circ.", T), ("145\\text{ degrees}", T), ("35^\\circ", F)]),
    ("units", "5.4 \\text{ cents}", [("5.4", T), ("5.4\\text{ cents}", T), ("5.4 cents", T), ("0.054", F), ("5.40", T), ("54", F)]),
    ("units", "\\frac{270}7\\text{ degrees}", [("\\frac{270}{7}", T), ("\\frac{270}{7}^\\circ", T), ("38\\frac{4}{7}", T), ("38.57", F)]),
    ("units", "864 \\mbox{ inches}^2", [("864", T), ("864 \\text{ in}^2", T), ("864 square inches", T), ("864\\text{ sq in}", T), ("846", F)]),
    ("units", "180\\text{ miles}", [("180", T), ("180 mi", T), ("180\\ \\text{miles}", T), ("18", F)]),
    ("units", "428\\text{ square centimeters}", [("428 \\text{ cm}^2", T), ("428", T), ("428 cm^2", T), ("482", F)]),
    ("units", "12\\sqrt{13}\\text{ feet}", [("12\\sqrt{13}", T), ("12\\sqrt{13} ft", T), ("\\sqrt{1872}", T), ("12\\sqrt{3}", F)]),
    ("units", "40\\text{ min}", [("40", T), ("40 minutes", T), ("40\\text{ minutes}", T), ("4", F)]),
    ("currency", "\\$18.90", [("18.90", T), ("18.9", T), ("\\$18.9", T), ("18.09", F), ("1890", F), ("\\$ 18.90", T)]),
    ("currency", "\\$1.05", [("1.05", T), ("\\$1.05", T), ("1.05 dollars", T), ("105", F), ("1.5", F)]),
    ("text", "\\text{Evelyn}", [("Evelyn", T), ("evelyn", T), ("\\textbf{Evelyn}", T), ("\\text{Navin}", F)]),
    ("text", "\\text{east}", [("East", T), ("\\text{East}", T), ("west", F)]),
    ("text", "\\text{ellipse}", [("ellipse", T), ("\\text{an ellipse}", F), ("\\text{parabola}", F)]),
    ("text", "\\text{even}", [("\\text{even}", T), ("even", T), ("\\text{odd}", F), ("\\text{neither}", F)]),
    ("choice", "\\text{(E)}", [("E", T), ("(E)", T), ("\\textbf{(E)}", T), ("\\text{E}", T), ("(D)", F), ("D", F)]),
    ("choice", "\\text{(C)}", [("C", T), ("(C)", T), ("\\text{(B)}", F)]),
    ("tuple", "(6,31,-1)", [("(6, 31, -1)", T), ("\\left(6,31,-1\\right)", T), ("(6,-1,31)", F), ("(6,31,1)", F)]),
    ("tuple", "\\left( 3, \\frac{\\pi}{2} \\right)", [("(3, \\frac{\\pi}{2})", T), ("(3, \\pi/2)", T), ("(3, 90^\\circ)", F), ("(\\frac{\\pi}{2}, 3)", F)]),
    ("tuple", "\\left( \\frac{3}{2}, -13 \\right)", [("(1.5, -13)", T), ("(\\frac32, -13)", T), ("(1.4999999, -13)", F)]),
    ("tuple", "(15,-29)", [("(15, -29)", T), ("(-29,15)", F), ("(15,29)", F)]),
    ("interval", "(-\\infty, 0]", [("(-\\infty,0]", T), ("\\left(-\\infty, 0\\right]", T), ("(-\\infty, 0)", F), ("(-\u221e, 0]", T)]),
    ("interval", "(0,9) \\cup (9,36)", [("(0, 9) \\cup (9, 36)", T), ("(0,36)", F), ("(9,36) \\cup (0,9)", T)]),
    ("interval", "(2,\\infty)", [("(2, \\infty)", T), ("[2,\\infty)", F), ("x \\in (2, \\infty)", T)]),
    ("interval", "(3,4]", [("(3, 4]", T), ("(3,4)", F), ("[3,4]", F)]),
    ("set-list", "1,-2", [("-2, 1", T), ("1, -2", T), ("\\{1, -2\\}", T), ("1", F), ("1, 2", F)]),
    ("set-list", "3, 5, 7", [("7, 5, 3", T), ("3,5,7", T), ("3, 5", F), ("3, 5, 7, 9", F)]),
    ("set-list", "1 \\pm \\sqrt{19}", [("1+\\sqrt{19}, 1-\\sqrt{19}", T), ("1\\pm\\sqrt{19}", T), ("1+\\sqrt{19}", F)]),
    ("set-list", "3 \\pm 2 \\sqrt{2}", [("3\\pm2\\sqrt2", T), ("3 - 2\\sqrt{2}, 3 + 2\\sqrt{2}", T), ("3+2\\sqrt{2}", F)]),
    ("expression", "p - q", [("-q+p", T), ("p-q", T), ("q-p", F)]),
    ("expression", "x^5 - x^4 + x^3 - x^2 + x - 1", [("x^5+x^3+x-x^4-x^2-1", T), ("(x-1)(x^4+x^2+1)", T),
                                                     ("x^5 - x^4 + x^3 - x^2 + x + 1", F)]),
    ("expression", "x^3+3x-6", [("x^3 + 3x - 6", T), ("-6+3x+x^3", T), ("x^3+3x+6", F)]),
    ("complex", "6 - 5i", [("-5i+6", T), ("6-5i", T), ("6+5i", F), ("6", F)]),
    ("complex", "1+274i", [("274i+1", T), ("1 + 274 i", T), ("1-274i", F)]),
    ("matrix", "\\begin{pmatrix} -10 \\\\ 6 \\end{pmatrix}", [("\\begin{pmatrix}-10\\\\6\\end{pmatrix}", T),
                                                            ("\\begin{bmatrix} -10 \\\\ 6 \\end{bmatrix}", T),
                                                            ("\\begin{pmatrix} 6 \\\\ -10 \\end{pmatrix}", F)]),
    ("matrix", "\\begin{pmatrix} 2 & 1 \\\\ 7 & -2 \\end{pmatrix}", [("\\begin{bmatrix}2&1\\\\7&-2\\end{bmatrix}", T),
                                                                    ("\\begin{pmatrix} 2 & 7 \\\\ 1 & -2 \\end{pmatrix}", F)]),
    ("equation", "b = -4", [("-4", T), ("b=-4", T), ("4", F)]),
    ("equation", "y = 2x - 13", [("y=2x-13", T), ("y = -13 + 2x", T), ("y=2x+13", F)]),
    ("thousands", "10,\\!080", [("10080", T), ("10,080", T), ("10 080", T), ("1008", F)]),
    ("thousands", "11,\\! 111,\\! 111,\\! 100", [("11111111100", T), ("11,111,111,100", T), ("1111111110", F)]),
    ("mixed-number", "137 \\frac{1}{2}", [("137.5", T), ("\\frac{275}{2}", T), ("275/2", T), ("137\\frac12", T), ("137", F)]),
    ("unicode", "-\\frac{\\pi}{6}", [("-\u03c0/6", T), ("-pi/6", T), ("\\frac{-\\pi}{6}", T), ("\\frac{\\pi}{6}", F), ("-30^\\circ", F)]),
    ("unicode", "2\\sqrt{3}", [("2\u221a3", T), ("\\sqrt{12}", T), ("2 sqrt(3)", T), ("3.46", F)]),
    ("number-word", "12", [("twelve", T), ("Twelve", T), ("twenty", F), ("\\text{twelve}", T)]),
    ("mixed-number", "\\frac{7}{3}", [("2 1/3", T), ("2\\frac13", T), ("2.33", F), ("7/3", T)]),
    ("mixed-number", "7", [("2 1/3", F), ("21/3", T)]),
    ("approx", "\\$\\dfrac23 \\approx \\$0.67", [("0.67", T), ("\\frac{2}{3}", T), ("\\$0.67", T), ("0.66", F),
                                                  ("0.6", F), ("\\frac23 \\approx 0.67", T)]),
    ("units", "12\\pi", [("12 \\pi \\text{ cm}^2", T), ("37.7", F), ("12\\pi^2", F)]),
    ("set-list", "1,-2", [("x=1, x=-2", T), ("x = 1 \\text{ or } x = -2", T), ("1 \\text{ and } -2", T),
                          ("x=1 \\text{ or } x=2", F)]),
    ("units", "60", [("60 km/h", T), ("60\\text{ m/s}", T), ("6", F), ("60 \\text{ mph}", T)]),
    ("approx", "3.14", [("x \\approx 3.14", T), ("\\pi \\approx 3.14", T), ("x \\approx 3.1", F)]),
    ("interval", "(2,\\infty)", [("(2, infinity)", T)]),
    ("base", "52_8", [("52_8", T), ("52_{8}", T), ("52", T), ("52_9", F), ("53_8", F), ("42", F)]),
    ("base", "4210_{5}", [("4210_5", T), ("4210", T), ("4210_{6}", F), ("555", F)]),
    ("constant", "\\frac{1}{2^{98}}", [("\\frac{1}{2^{99}}", F), ("2^{-98}", T), ("\\left(\\frac12\\right)^{98}", T),
                                       ("0", F), ("\\frac{2}{2^{99}}", T)]),
    ("base", "-37_8", [("-37_8", T), ("-37_9", F), ("37_8", F)]),
    ("set-list", "6, 8\\text{, and }10", [("6, 8, 10", T), ("6, 8 \\text{ and } 10", T), ("6, 8", F)]),
    ("hedged", "3", [("3 \\text{ or } 4", F), ("3, 4", F), ("\\pm 3", F), ("3 \\text{ and } -3", F)]),
    # whole responses: nested and truncated boxes
    ("nested-box:response", "3", [("so $\\boxed{\\frac{7}{\\boxed{3}}}$", F), ("$\\boxed{\\boxed{3}}$", T),
                                  ("\\boxed{x = \\boxed{3}}", T), ("First \\boxed{5}, corrected: \\boxed{3}", T),
                                  ("\\boxed{3} wait, no: \\boxed{4}", F), ("\\boxed{\\sqrt{\\boxed{9}}}", T),
                                  ("\\boxed{2 + \\boxed{1}}", T), ("\\boxed{\\boxed{3}^{2}}", F)]),
    ("nested-box:response", "\\frac{7}{3}", [("$\\boxed{\\frac{7}{\\boxed{3}}}$", T), ("\\boxed{\\frac{\\boxed{7}}{3}}", T)]),
    ("truncated-box:response", "42", [("The answer is 42. So \\boxed{42", F), ("Final answer: \\boxed{42", F),
                                      ("\\boxed{41} then \\boxed{42", F), ("the answer is \\boxed{42}", T),
                                      ("The final answer is 42.", T), ("\\boxed{\\frac{84}{2", F)]),
    ("truncated-box:response", "\\frac{1}{2}", [("\\boxed{\\frac{1}{2", F), ("\\boxed{\\frac{1}{2}", F),
                                               ("so \\boxed{\\dfrac{1}{2}}.", T)]),
]


def _index() -> dict[str, str]:
    """gold answer string -> "file:row id" (the first row with that answer)."""
    idx: dict[str, str] = {}
    for name, key in [("math500/test.jsonl", "unique_id"), ("math_train/train.jsonl", "source_unique_id"),
                      ("gsm8k/test.jsonl", "id"), ("aime24/test.jsonl", "id")]:
        for line in (DATA / name).read_text().splitlines():
            row = json.loads(line)
            idx.setdefault(row["answer"], f"{name.split('/')[0]}:{row[key]}")
    return idx


def main() -> int:
    idx = _index()
    rows = []
    for category, gold, preds in CASES:
        kind = "response" if category.endswith(":response") else "answer"
        source = idx.get(gold, "synthetic")
        for pred, verdict in preds:
            rows.append({"pred": pred, "gold": gold, "verdict": verdict,
                         "category": category.split(":")[0], "kind": kind, "source": source})
    OUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    real = sum(r["source"] != "synthetic" for r in rows)
    print(f"{OUT}: {len(rows)} cases, {real} with a benchmark gold", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
