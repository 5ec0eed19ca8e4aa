"""Writes the malformed-input corpus (tests/malformed/*) and MANIFEST.json: ``python tests/malformed/make_corpus.py``.

Each entry: ``file``, ``reader`` (``dataset``: satseq.data.load_problems / ``satseq eval --dataset``;
``config``: satseq.config.load_config / ``satseq train``), ``expect`` (``ok`` or ``error``),
``contains`` (substrings the one-line message must hold) and ``line`` (the line it must name, if any).
The files are committed; this script documents how each was made.
"""
from __future__ import annotations

import gzip
import io
import json
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ENTRIES: list[dict] = []


def j(obj) -> str:
    return json.dumps(obj, ensure_ascii=False)


def add(name: str, data: bytes | str, reader: str, expect: str, contains=(), line: int | None = None, note: str = ""):
    raw = data.encode("utf-8") if isinstance(data, str) else data
    (HERE / name).write_bytes(raw)
    e = {"file": name, "reader": reader, "expect": expect, "contains": list(contains), "note": note}
    if line is not None:
        e["line"] = line
    ENTRIES.append(e)


def lines(*rows) -> str:
    return "".join((r if isinstance(r, str) else j(r)) + "\n" for r in rows)


OK = {"problem": "1+1?", "answer": "2"}
D, C = "dataset", "config"

# ------------------------------------------------------------------------ datasets: accepted
add("ok_basic.jsonl", lines(OK, {"problem": "2+2?", "answer": "4", "id": "b"}), D, "ok")
add("ok_bom_crlf.jsonl", "\ufeff" + lines(OK, {"problem": "3?", "answer": "3"}).replace("\n", "\r\n"), D, "ok",
    note="UTF-8 BOM and CRLF line ends")
add("ok_extra_fields.jsonl", lines({**OK, "level": 3, "tags": ["a", None], "score": 0.5, "meta": {"x": [1, 2]}}), D, "ok")
add("ok_dapo.jsonl", lines({"prompt": "Solve x", "chosen": "so \\boxed{7}", "rejected": "\\boxed{3}"}), D, "ok")
add("ok_array.json", "[\n  " + j(OK) + ",\n  " + j({"problem": "b", "answer": "1"}) + "\n]\n", D, "ok")
add("ok_wrapped.json", j({"version": 1, "data": [OK]}), D, "ok")
add("ok_jsonlines.json", lines(OK, {"problem": "b", "answer": "1"}), D, "ok", note="JSON lines in a .json file")
add("ok_gsm8k.jsonl", lines({"question": "How many?", "answer": "We add.\n#### 1,234"}), D, "ok")
add("ok_chat_prompt.jsonl", lines({"prompt": [{"role": "system", "content": "brief"}, {"role": "user", "content": "z?"}],
                                   "reward_model": {"ground_truth": "9"}}), D, "ok")
add("ok_unicode.jsonl", lines({"problem": "π ≈ ? — 🙂 \\u00e9", "answer": "3.14"}, '{"problem": "\\ud83d\\ude42", "answer": "x"}'),
    D, "ok", note="non-ASCII text and a valid surrogate pair escape")
add("ok_blank_lines.jsonl", "\n" + lines(OK) + "\n   \n" + lines({"problem": "b", "answer": "1"}), D, "ok")

add("ok_cr_only.jsonl", lines(OK, {"problem": "b", "answer": "1"}).replace("\n", "\r"), D, "ok", note="old Mac line ends")
add("ok_no_final_newline.jsonl", j(OK), D, "ok")
add("ok_bom_only_first_line.json", "\ufeff" + j([OK]), D, "ok")

# ------------------------------------------------------------------------ datasets: undecodable
add("gzip.jsonl", gzip.compress(lines(OK).encode(), mtime=0), D, "error", ["not UTF-8 text", "gzip"])
add("utf16_bom.jsonl", lines(OK).encode("utf-16"), D, "error", ["not UTF-8 text", "UTF-16"])
add("utf16le_nobom.jsonl", lines(OK, OK).encode("utf-16-le"), D, "error", ["not UTF-8 text", "UTF-16"])
add("utf32.jsonl", lines(OK).encode("utf-32"), D, "error", ["not UTF-8 text", "UTF-32"])
_zip = io.BytesIO()
with zipfile.ZipFile(_zip, "w") as zf:
    zf.writestr(zipfile.ZipInfo("data.jsonl", date_time=(2020, 1, 1, 0, 0, 0)), lines(OK))
add("zipped.jsonl", _zip.getvalue(), D, "error", ["not UTF-8 text", "zip"])
add("invalid_utf8.jsonl", lines(OK).encode() + b'{"problem": "caf\xe9", "answer": "1"}\n', D, "error",
    ["not UTF-8 text", "0xe9"], line=2)
add("latin1.json", '[{"problem": "Übung", "answer": "1"}]'.encode("latin-1"), D, "error", ["not UTF-8 text"], line=1)
add("nul_bytes.jsonl", lines(OK).encode() + b'{"problem": "a\x00", "answer": "1"}\n', D, "error", ["not UTF-8 text", "NUL"])
add("encoded_surrogate.jsonl", b'{"problem": "a", "answer": "\xed\xa0\x80"}\n', D, "error", ["not UTF-8 text"], line=1,
    note="a surrogate encoded as UTF-8 bytes (CESU-8)")

# ------------------------------------------------------------------------ datasets: JSON values
add("nan_answer.jsonl", lines(OK, '{"problem": "a", "answer": NaN}'), D, "error", ["'answer'", "NaN"], line=2)
add("infinity_extra.jsonl", lines('{"problem": "a", "answer": "1", "weight": -Infinity}'), D, "error",
    ["'weight'", "Infinity"], line=1)
add("overflow_number.jsonl", lines('{"problem": "a", "answer": "1", "x": [1, 1e999]}'), D, "error", ["'x'", "1e999"], line=1)
add("nan_in_array.json", '[\n  {"problem": "a", "answer": "1"},\n  {"problem": "b",\n   "answer": "2", "v": NaN}\n]\n', D,
    "error", ["'v'", "NaN"], line=3)
add("huge_int.jsonl", lines('{"problem": "a", "answer": "1", "n": ' + "9" * 5000 + "}"), D, "error", ["digits"], line=1)
add("numeric_answer.jsonl", lines('{"problem": "a", "answer": 27.0}'), D, "error", ["'answer'", "must be a string", "27.0"], line=1)
add("int_answer.jsonl", lines(OK, {"problem": "a", "answer": 27}), D, "error", ["'answer'", "must be a string"], line=2)
add("bool_answer.jsonl", lines({"problem": "a", "answer": True}), D, "error", ["'answer'", "must be a string"], line=1)
add("list_answer.jsonl", lines({"problem": "a", "answer": ["1", "2"]}), D, "error", ["'answer'", "must be a string"], line=1)
add("object_answer.json", j([{"problem": "a", "answer": {"value": "1"}}]), D, "error", ["'answer'", "must be a string"], line=1)
add("null_answer.jsonl", lines({"problem": "a", "answer": None}), D, "error", ["empty field 'answer'"], line=1)
add("empty_answer.jsonl", lines(OK, {"problem": "a", "answer": ""}), D, "error", ["empty field 'answer'"], line=2)
add("missing_answer.jsonl", lines({"problem": "a", "solution": "x"}), D, "error", ["missing field 'answer'"], line=1)
add("blank_problem.jsonl", lines({"problem": " \t\n ", "answer": "1"}), D, "error", ["empty field 'problem'"], line=1)
add("null_problem.jsonl", lines({"problem": None, "answer": "1"}), D, "error", ["empty field 'problem'"], line=1)
add("numeric_problem.jsonl", lines({"problem": 12, "answer": "1"}), D, "error", ["'problem'", "must be a string"], line=1)
add("numeric_question.jsonl", lines({"question": 1.5, "answer": "1"}), D, "error", ["'question'", "must be a string"], line=1)
add("empty_chat_content.jsonl", lines({"prompt": [{"role": "user", "content": ""}], "reward_model": {"ground_truth": "1"}}),
    D, "error", ["empty field 'prompt'"], line=1)
add("numeric_ground_truth.jsonl", lines({"prompt": "a", "reward_model": {"ground_truth": 3}}), D, "error",
    ["'reward_model.ground_truth'", "must be a string"], line=1)
add("dup_key.jsonl", lines(OK, '{"problem": "a", "answer": "1", "answer": "2"}'), D, "error", ["duplicate key 'answer'"], line=2)
add("dup_key_nested.jsonl", lines('{"problem": "a", "answer": "1", "meta": {"k": 1, "k": 2}}'), D, "error",
    ["duplicate key 'k'"], line=1)
add("dup_key_array.json", '[\n  {"problem": "a", "answer": "1"},\n  {"problem": "b",\n   "answer": "2",\n   "answer": "3"}\n]\n',
    D, "error", ["duplicate key 'answer'"], line=3)
add("dup_key_wrapper.json", '{"data": [{"problem": "a", "answer": "1"}],\n "data": []}\n', D, "error", ["duplicate key 'data'"], line=1)
add("lone_surrogate_answer.jsonl", lines(OK, '{"problem": "a", "answer": "\\ud800"}'), D, "error", ["'answer'", "surrogate"], line=2)
add("lone_surrogate_key.jsonl", lines('{"problem": "a", "answer": "1", "\\udfff": 1}'), D, "error", ["surrogate"], line=1)
add("lone_surrogate_in_list.json", '[{"problem": "a", "answer": "1", "tags": ["ok", "\\udc00"]}]', D, "error",
    ["'tags'", "surrogate"], line=1)
add("chosen_number.jsonl", lines({"prompt": "a", "chosen": 42, "rejected": "41"}), D, "error", ["'chosen'", "must be a string"], line=1)
add("missing_rejected.jsonl", lines({"prompt": "a", "chosen": "\\boxed{1}", "rejected": "0"}, {"prompt": "b", "chosen": "\\boxed{2}"}),
    D, "error", ["missing field 'rejected'"], line=2)
add("missing_chosen.jsonl", lines({"prompt": "a", "rejected": "0", "answer": "1"}), D, "error", ["missing field 'chosen'"], line=1)
add("empty_rejected.jsonl", lines({"prompt": "a", "chosen": "\\boxed{1}", "rejected": "  "}), D, "error", ["empty field 'rejected'"], line=1)
add("null_chosen.jsonl", lines({"prompt": "a", "chosen": None, "rejected": "x"}), D, "error", ["empty field 'chosen'"], line=1)
add("float_id.jsonl", lines({**OK, "id": 1.5}), D, "error", ["'id'", "string or an integer"], line=1)
add("empty_id.jsonl", lines({**OK, "id": ""}), D, "error", ["'id'", "non-empty"], line=1)
add("dup_problem_id.jsonl", lines({**OK, "id": 7}, {**OK, "id": 7}), D, "error", ["duplicate problem_id 7"], line=2)
add("truncated.jsonl", lines(OK) + '{"problem": "a", "ans', D, "error", ["malformed JSON"], line=2)
add("not_an_object.jsonl", lines(OK, [1, 2]), D, "error", ["expected a JSON object", "array"], line=2)
add("control_char.jsonl", lines(OK) + '{"problem": "a\tb", "answer": "1"}\n', D, "error", ["malformed JSON", "control character"], line=2)
add("deep_nesting.json", "[" * 20000 + "]" * 20000, D, "error", ["nested too deeply"])
add("scalar.json", "42\n", D, "error", ["expected a list of objects"])
add("empty.jsonl", "\n\n", D, "error", ["no rows"])
add("zero_bytes.jsonl", b"", D, "error", ["no rows"])
add("bom_on_line_2.jsonl", lines(OK) + "\ufeff" + lines(OK), D, "error", ["malformed JSON"], line=2)
add("trailing_comma.jsonl", lines('{"problem": "a", "answer": "1",}'), D, "error", ["malformed JSON"], line=1)
add("empty_chat_list.jsonl", lines({"prompt": [], "answer": "1"}), D, "error", ["'prompt'", "list of chat messages"], line=1)
add("gsm8k_empty_final.jsonl", lines({"question": "q", "answer": "steps\n####   "}), D, "error", ["empty field 'answer'"], line=1)
add("data_not_a_list.json", j({"data": "rows.jsonl"}), D, "error", ["expected a list of objects"])
add("not_parquet.parquet", "problem,answer\n1+1,2\n", D, "error", ["cannot read parquet"])

# ------------------------------------------------------------------------ configs: accepted
add("ok_config.yaml", "method: grpo\nalgorithm:\n  gamma: 0.9\nppo:\n  lr: 1e-5\ntrainer:\n  progress: yes\n", C, "ok",
    note="YAML 1.1 booleans are fine for boolean keys; 1e-5 is a number")
add("ok_bom_crlf.yaml", "\ufeffalgorithm:\r\n  gamma: 0.5\r\n", C, "ok")
add("ok_anchors.yaml", "sat_seq:\n  agents:\n    - &a {name: agent_1, path: embedded}\n    - <<: *a\n      name: agent_2\n", C, "ok",
    note="a small anchor and merge key")
add("ok_empty.yaml", "# nothing\n", C, "ok")

# ------------------------------------------------------------------------ configs: refused
add("bool_gamma.yaml", "algorithm:\n  lam: 0.9\n  gamma: yes\n", C, "error",
    ["algorithm.gamma: expected a number, got a boolean (yes)"], line=3)
add("bool_int.yaml", "trainer:\n  num_stages: on\n", C, "error", ["trainer.num_stages", "boolean (on)"], line=2)
add("bool_in_list.yaml", "sat_seq:\n  certificate:\n    prompts: false\n", C, "error", ["sat_seq.certificate.prompts", "boolean"], line=3)
add("inf_clip.yaml", "sat_seq:\n  A_clip: .inf\n", C, "error", ["sat_seq.A_clip", "finite", ".inf"], line=2)
add("nan_gamma.yaml", "algorithm:\n  gamma: .NaN\n", C, "error", ["algorithm.gamma", "finite"], line=2)
add("overflow_float.yaml", "ppo:\n  lr: 1.0e+999\n", C, "error", ["ppo.lr", "finite"], line=2)
add("nan_string.yaml", "algorithm:\n  gamma: 'nan'\n", C, "error", ["algorithm.gamma", "finite"])
add("dup_key_top.yaml", "seed: 1\nalgorithm:\n  gamma: 0.9\nseed: 2\n", C, "error", ["duplicate key 'seed'"], line=4)
add("dup_key_nested.yaml", "algorithm:\n  gamma: 0.9\n  lam: 0.9\n  gamma: 0.8\n", C, "error", ["duplicate key 'gamma'"], line=4)
add("dup_key_flow.yaml", "algorithm: {gamma: 0.9, gamma: 0.8}\n", C, "error", ["duplicate key 'gamma'"], line=1)
_bomb = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
for prev, cur in zip("abcdefgh", "bcdefghi"):
    _bomb.append(f"{cur}: &{cur} [" + ", ".join(["*" + prev] * 9) + "]")
add("alias_bomb.yaml", "\n".join(_bomb) + "\n", C, "error", ["aliases expand"])
add("recursive_alias.yaml", "a: &x\n  b: *x\n", C, "error", ["recursive"], line=2)
add("python_tag.yaml", "seed: !!python/object/apply:os.system ['echo pwned']\n", C, "error", ["tag", "!!python/object"], line=1)
add("binary_tag.yaml", "run_name: !!binary aGVsbG8=\n", C, "error", ["tag", "!!binary"], line=1)
add("custom_tag.yaml", "algorithm:\n  gamma: !half 0.5\n", C, "error", ["tag", "!half"], line=2)
add("utf16.yaml", "algorithm:\n  gamma: 0.5\n".encode("utf-16"), C, "error", ["not UTF-8 text", "UTF-16"])
add("gzip.yaml", gzip.compress(b"seed: 1\n", mtime=0), C, "error", ["not UTF-8 text", "gzip"])
add("invalid_utf8.yaml", b"seed: 1\nrun_name: caf\xe9\n", C, "error", ["not UTF-8 text"], line=2)
add("control_char.yaml", "seed: 1\x07\n", C, "error", ["invalid YAML", "#x0007"], line=1)
add("multi_document.yaml", "---\nseed: 1\n---\nseed: 2\n", C, "error", ["invalid YAML", "another document"], line=3)
add("null_key.yaml", "~: 1\n", C, "error", ["Keys should be strings"])
add("section_is_bool.yaml", "algorithm: yes\n", C, "error", ["config key 'algorithm'"], line=1)
add("fractional_int.yaml", "seed: 1.5\n", C, "error", ["config key 'seed'", "fractional"], line=1)
add("neg_inf.yaml", "algorithm:\n  kl_ctrl:\n    target_kl: -.Inf\n", C, "error", ["algorithm.kl_ctrl.target_kl", "finite"], line=3)
add("string_infinity.yaml", "algorithm:\n  gamma: \"Infinity\"\n", C, "error", ["algorithm.gamma", "finite"], line=2)
add("override_in_flow_dup.yaml", "model: {path: a, path: b}\n", C, "error", ["duplicate key 'path'"], line=1)
add("not_a_mapping.yaml", "- seed\n- 1\n", C, "error", ["top level must be a mapping"])
add("syntax_error.yaml", "algorithm:\n  gamma: [0.9\n", C, "error", ["invalid YAML"])
add("tab_indent.yaml", "algorithm:\n\tgamma: 0.9\n", C, "error", ["invalid YAML"], line=2)
add("unknown_key.yaml", "algorithm:\n  gama: 0.9\n", C, "error", ["unknown config key 'algorithm.gama'", "algorithm.gamma"])
add("string_gamma.yaml", "algorithm:\n  gamma: abc\n", C, "error", ["algorithm.gamma", "valid number"])
add("huge_value.yaml", "algorithm:\n  gamma: " + "x" * 20_000 + "\n", C, "error", ["algorithm.gamma"],
    note="the message shows a few dozen characters of the value")
add("huge_list_value.yaml", "seed: [" + ", ".join(["1"] * 5_000) + "]\n", C, "error", ["seed"])

(HERE / "MANIFEST.json").write_text(json.dumps({"entries": ENTRIES}, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
print(f"{len(ENTRIES)} files")
