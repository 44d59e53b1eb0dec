"""Fitness tasks: exact benchmark prompts, positions, data validation, splits (rope_adapter.scoring.tasks)."""

from __future__ import annotations

import gzip
import json
import random
import re

import pytest
from testkit.tiny_models import byte_tokenizer, chat_tokenizer

from rope_adapter.scoring.tasks import (
    KVRetrievalTask,
    MDQATask,
    PasskeyTask,
    PerplexityTask,
    Sample,
    Task,
    apply_chat_template,
    available_tasks,
    best_subspan_em,
    build,
    evenly_spaced_positions,
    get_task,
    normalize_answer,
    register_task,
    split_records,
)
from rope_adapter.scoring.tasks.kv_retrieval import format_kv_records, kv_prompt, random_uuid4
from rope_adapter.scoring.tasks.mdqa import Document, qa_prompt

UUID4 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def write_jsonl_gz(path, rows):
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return str(path)


def kv_file(tmp_path, num_records=4, num_pairs=20, seed=1):
    rng = random.Random(seed)
    rows = []
    for _ in range(num_records):
        pairs = [[random_uuid4(rng), random_uuid4(rng)] for _ in range(num_pairs)]
        gold = pairs[rng.randrange(num_pairs)]
        rows.append({"ordered_kv_records": pairs, "key": gold[0], "value": gold[1]})
    return write_jsonl_gz(tmp_path / "kv-retrieval-20_keys.jsonl.gz", rows), rows


def qa_file(tmp_path, num_records=6, ctxs_per_record=1):
    rows = []
    for i in range(num_records):
        gold = {
            "title": f"Topic {i}",
            "text": f"The answer to riddle {i} is Answer{i}.",
            "hasanswer": True,
            "isgold": True,
        }
        others = [
            {
                "title": f"Other {i}.{j}",
                "text": f"Filler {i}.{j} mentions nothing.",
                "hasanswer": False,
                "isgold": False,
            }
            for j in range(ctxs_per_record - 1)
        ]
        ctxs = others[:1] + [gold] + others[1:] if others else [gold]
        rows.append({"question": f"what is riddle {i}", "answers": [f"Answer{i}", f"A{i}"], "ctxs": ctxs})
    return write_jsonl_gz(tmp_path / "nq-open-test.jsonl.gz", rows), rows


# registry -----------------------------------------------------------------------------------------------------


def test_registry_lists_and_returns_task_classes():
    assert {"kv_retrieval", "passkey", "mdqa", "perplexity"} <= set(available_tasks())
    assert get_task("kv_retrieval") is KVRetrievalTask
    assert get_task("mdqa") is MDQATask
    with pytest.raises(ValueError, match=r"unknown task 'nope'; known tasks: .*kv_retrieval"):
        get_task("nope")


def test_register_refuses_a_second_class_under_a_taken_name():
    with pytest.raises(ValueError, match="already registered"):

        @register_task("kv_retrieval")
        class Other(KVRetrievalTask):
            pass

    with pytest.raises(TypeError):
        register_task("not_a_task")(object)


# helpers ------------------------------------------------------------------------------------------------------


def test_evenly_spaced_positions():
    assert evenly_spaced_positions(20) == [0, 5, 10, 14, 19]
    assert evenly_spaced_positions(140) == [0, 35, 70, 104, 139]
    assert evenly_spaced_positions(10, 3) == [0, 5, 9]
    assert evenly_spaced_positions(7, 1) == [0]
    with pytest.raises(
        ValueError, match=r"5 distinct gold positions in 3 slots: ask for at most 3 \(--num-positions\)"
    ):
        evenly_spaced_positions(3, 5)


def test_split_records_is_disjoint_and_seeded():
    records = list(range(30))
    search, holdout = split_records(records, 10, 15, seed=3)
    assert len(search) == 10 and len(holdout) == 15 and not set(search) & set(holdout)
    assert split_records(records, 10, 15, seed=3) == (search, holdout)
    assert split_records(records, 10, 15, seed=4) != (search, holdout)
    with pytest.raises(ValueError, match="only 30 are available"):
        split_records(records, 20, 11)


def test_sample_needs_a_target():
    with pytest.raises(ValueError, match="empty target"):
        Sample(prefix="a", query="b", answers=["c"], position=0, record_id="r", target="")


# key-value retrieval ------------------------------------------------------------------------------------------


def test_kv_prompt_is_the_benchmark_prompt():
    data = [("test key1", "test value1"), ("test key2", "test value2"), ("test key3", "test value3")]
    gold = "\n".join(
        [
            "Extract the value corresponding to the specified key in the JSON object below.",
            "",
            "JSON data:",
            '{"test key1": "test value1",',
            ' "test key2": "test value2",',
            ' "test key3": "test value3"}',
            "",
            'Key: "test key2"',
            "Corresponding value:",
        ]
    )
    assert kv_prompt(data, "test key2") == gold
    assert format_kv_records(data[:2]) == '{"test key1": "test value1",\n "test key2": "test value2"}'


def test_kv_from_file_shares_one_prefix_per_record(tmp_path):
    path, rows = kv_file(tmp_path)
    task = KVRetrievalTask(data_path=path, num_positions=5)
    records = task.load_records()
    assert len(records) == 4
    samples = task.build_samples(records)
    assert len(samples) == 4 * 5
    # by default 25 gold positions, or every pair of a shorter record (these have 20)
    assert [s.position for s in KVRetrievalTask(data_path=path).build_samples(records[:1])] == list(range(20))
    first = samples[:5]
    assert [s.position for s in first] == [0, 5, 10, 14, 19]
    assert len({s.prefix for s in first}) == 1 and len({s.query for s in first}) == 5
    pairs = rows[0]["ordered_kv_records"]
    for s in first:
        key, value = pairs[s.position]
        assert s.prompt == kv_prompt(pairs, key)
        assert s.query == f'\n\nKey: "{key}"\nCorresponding value:'
        assert s.answers == [value] and s.target == " " + value
        assert s.record_id == first[0].record_id and s.task == "kv_retrieval"
    assert samples[5].record_id != samples[0].record_id
    assert len(KVRetrievalTask(data_path=path, num_records=2).load_records()) == 2


def test_kv_synthetic_is_seeded_uuid4():
    task = KVRetrievalTask(num_records=3, num_pairs=6, positions=[0, 3, 5], seed=7)
    records = task.load_records()
    assert len(records) == 3 and all(len(r.pairs) == 6 for r in records)
    assert all(UUID4.match(s) for r in records for pair in r.pairs for s in pair)
    assert records == KVRetrievalTask(num_records=3, num_pairs=6, seed=7).load_records()
    assert records != KVRetrievalTask(num_records=3, num_pairs=6, seed=8).load_records()
    samples = task.build_samples(records)
    assert [s.position for s in samples[:3]] == [0, 3, 5]


def test_kv_is_correct_is_case_insensitive_containment():
    task = KVRetrievalTask(num_records=1, num_pairs=4, positions=[1])
    sample = task.samples()[0]
    value = sample.answers[0]
    assert task.is_correct(f' "{value.upper()}"', sample)
    assert not task.is_correct(value[:-1], sample)


def test_kv_errors_come_before_any_work(tmp_path):
    with pytest.raises(ValueError, match=r"positions \[20\] outside 0..19"):
        KVRetrievalTask(num_pairs=20, positions=[0, 20])
    with pytest.raises(FileNotFoundError, match="does not exist"):
        KVRetrievalTask(data_path=str(tmp_path / "missing.jsonl.gz"))
    empty = write_jsonl_gz(tmp_path / "empty.jsonl.gz", [])
    with pytest.raises(ValueError, match="holds no records"):
        KVRetrievalTask(data_path=empty).load_records()
    wrong = write_jsonl_gz(tmp_path / "wrong.jsonl.gz", [{"key": "a", "value": "b"}])
    with pytest.raises(ValueError, match=r"line 1 misses key\(s\) \['ordered_kv_records'\]"):
        KVRetrievalTask(data_path=wrong).load_records()
    bad_pair = write_jsonl_gz(tmp_path / "bad.jsonl.gz", [{"ordered_kv_records": [["a", "b"], ["c"]]}])
    with pytest.raises(ValueError, match="not a \\[key, value\\] string pair"):
        KVRetrievalTask(data_path=bad_pair).load_records()
    not_json = tmp_path / "not.jsonl"
    not_json.write_text("{oops\n")
    with pytest.raises(ValueError, match="line 1 is not valid JSON"):
        KVRetrievalTask(data_path=str(not_json)).load_records()
    not_gzip = tmp_path / "fake.jsonl.gz"
    not_gzip.write_text("plain text")
    with pytest.raises(ValueError, match="cannot read data file"):
        KVRetrievalTask(data_path=str(not_gzip)).load_records()
    path, _ = kv_file(tmp_path, num_pairs=8)
    with pytest.raises(ValueError, match=r"positions \[10\] outside 0..7"):
        KVRetrievalTask(data_path=path, positions=[0, 10]).load_records()


# multi-document QA --------------------------------------------------------------------------------------------


def test_qa_prompt_is_the_benchmark_prompt():
    docs = [Document("first doc", "first doc text"), Document("second doc", "second doc text")]
    gold = (
        "Write a high-quality answer for the given question using only the provided search results "
        "(some of which might be irrelevant).\n\nDocument [1](Title: first doc) first doc text\n"
        "Document [2](Title: second doc) second doc text\n\nQuestion: test question\nAnswer:"
    )
    assert qa_prompt("test question", docs) == gold


def test_mdqa_moves_the_gold_document(tmp_path):
    path, rows = qa_file(tmp_path, num_records=8, ctxs_per_record=1)
    task = MDQATask(data_path=path, num_records=3, num_documents=5, positions=[0, 2, 4])
    records = task.load_records()
    assert len(records) == 3
    samples = task.build_samples(records)
    assert len(samples) == 9
    for s in samples:
        lines = [line for line in s.prefix.split("\n") if line.startswith("Document [")]
        assert len(lines) == 5
        gold_line = lines[s.position]
        assert gold_line.startswith(f"Document [{s.position + 1}](Title: Topic ")
        assert s.answers[0] in gold_line
        # distractors never contain this record's answer
        assert all(s.answers[0] not in line for i, line in enumerate(lines) if i != s.position)
        assert s.query.startswith("\n\nQuestion: what is riddle ") and s.query.endswith("\nAnswer:")
        assert s.target == " " + s.answers[0]
    # the distractors keep their order across positions
    first = [s for s in samples if s.record_id == samples[0].record_id]
    strip = [[ln for ln in s.prefix.split("\n")[2:] if "Topic 0" not in ln] for s in first]
    assert all([ln.split(")", 1)[1] for ln in x] == [ln.split(")", 1)[1] for ln in strip[0]] for x in strip)
    # seeded
    assert task.load_records() == records


def test_mdqa_uses_the_records_own_distractors(tmp_path):
    path, rows = qa_file(tmp_path, num_records=2, ctxs_per_record=4)
    task = MDQATask(data_path=path, num_documents=4, positions=[3])
    record = task.load_records()[0]
    assert record.gold.title == "Topic 0"
    assert [d.title for d in record.distractors] == ["Other 0.0", "Other 0.1", "Other 0.2"]


def test_mdqa_errors(tmp_path):
    with pytest.raises(ValueError, match="needs data_path"):
        MDQATask()
    path, _ = qa_file(tmp_path, num_records=3)
    with pytest.raises(ValueError, match=r"positions \[10\] outside 0..9"):
        MDQATask(data_path=path, positions=[10])
    with pytest.raises(ValueError, match="lower num_documents"):
        MDQATask(data_path=path, num_documents=10).load_records()
    bad = write_jsonl_gz(tmp_path / "bad.jsonl.gz", [{"question": "q", "ctxs": []}])
    with pytest.raises(ValueError, match=r"misses key\(s\) \['answers'\]"):
        MDQATask(data_path=bad).load_records()
    no_gold = write_jsonl_gz(
        tmp_path / "nogold.jsonl.gz",
        [{"question": "q", "answers": ["a"], "ctxs": [{"title": "t", "text": "x"}, {"title": "u", "text": "y"}]}],
    )
    with pytest.raises(ValueError, match="isgold"):
        MDQATask(data_path=no_gold).load_records()
    no_title = write_jsonl_gz(
        tmp_path / "notitle.jsonl.gz", [{"question": "q", "answers": ["a"], "ctxs": [{"text": "x"}]}]
    )
    with pytest.raises(ValueError, match=r"misses key\(s\) \['title'\]"):
        MDQATask(data_path=no_title).load_records()


def test_best_subspan_em_is_the_squad_rule():
    assert normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert normalize_answer("a cat and an owl") == "cat and owl"
    assert best_subspan_em("It was Wilhelm Conrad Röntgen.", ["Wilhelm Conrad Röntgen"]) == 1.0
    assert best_subspan_em("Röntgen", ["Wilhelm Conrad Röntgen"]) == 0.0
    assert best_subspan_em("the answer is Paris", ["London", "paris"]) == 1.0


def test_mdqa_judges_the_first_line_only(tmp_path):
    path, _ = qa_file(tmp_path, num_records=3)
    task = MDQATask(data_path=path, num_documents=3, positions=[1])
    sample = task.samples()[0]
    assert task.is_correct(" Answer0\nmore text", sample)
    assert not task.is_correct(" I don't know\nAnswer0", sample)


# passkey ------------------------------------------------------------------------------------------------------


def test_passkey_places_the_needle_at_each_slot():
    task = PasskeyTask(num_records=2, num_filler=8, positions=[0, 4, 8])
    samples = task.samples()
    assert len(samples) == 6
    for s in samples:
        key = s.answers[0]
        assert len(key) == 5 and key.isdigit() and s.target == " " + key
        body = s.prefix.split("\n\n", 1)[1]
        before = body.split("The pass key is")[0]
        assert before.count("The grass is green.") == s.position
        assert s.query == "\n\nWhat is the pass key? The pass key is"
    assert task.is_correct(f" {samples[0].answers[0]}.", samples[0])
    assert not task.is_correct(f" {samples[0].answers[0]}7", samples[0])
    with pytest.raises(ValueError, match=r"outside 0..8"):
        PasskeyTask(num_filler=8, positions=[9])


# perplexity ---------------------------------------------------------------------------------------------------


def test_perplexity_windows(tmp_path):
    text = " ".join(f"word{i}" for i in range(400))
    path = tmp_path / "text.txt"
    path.write_text(text)
    task = PerplexityTask(data_path=str(path), window_chars=200)
    samples = task.samples()
    assert len(samples) > 5
    assert all(s.prefix == "" and s.query == "" and len(s.target) <= 200 for s in samples)
    assert " ".join(s.target for s in samples) == text  # non-overlapping windows cover the text
    assert [s.position for s in samples] == list(range(len(samples)))
    assert not task.supports_generation
    with pytest.raises(NotImplementedError):
        task.is_correct("x", samples[0])

    tok_task = PerplexityTask(data_path=str(path), window_tokens=100, tokenizer=byte_tokenizer(), num_windows=3)
    windows = tok_task.samples()
    assert len(windows) == 3 and all(len(w.target) <= 100 for w in windows)

    with pytest.raises(ValueError, match="needs a tokenizer"):
        PerplexityTask(data_path=str(path), window_tokens=100)
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n")
    with pytest.raises(ValueError, match="is empty"):
        PerplexityTask(data_path=str(empty)).load_records()


# chat template ------------------------------------------------------------------------------------------------


def test_chat_template_keeps_the_prefix_shared():
    tok = chat_tokenizer("<|", "|>", "<|end|>")
    samples = KVRetrievalTask(num_records=1, num_pairs=4, positions=[0, 3]).samples()
    templated = apply_chat_template(samples, tok)
    assert all(s.chat for s in templated)
    assert templated[0].prefix == templated[1].prefix == "<|user|>\n" + samples[0].prefix
    assert templated[0].query == samples[0].query + "<|end|>\n<|assistant|>\n"
    assert templated[0].target == samples[0].answers[0]
    with pytest.raises(ValueError, match="already went through"):
        apply_chat_template(templated, tok)
    with pytest.raises(ValueError, match="no chat template"):
        apply_chat_template(samples, byte_tokenizer())


def test_every_registered_task_builds_and_a_position_task_makes_samples(tmp_path):
    """Each registered name builds an instance of its own class (with a data file where it needs one), and a
    position task (what search and eval sweep) yields samples at its gold positions."""
    (tmp_path / "book.txt").write_text("Some text to measure. " * 50)
    data = {"mdqa": qa_file(tmp_path, ctxs_per_record=20)[0], "perplexity": tmp_path / "book.txt"}
    for name in available_tasks():
        options = {"data_path": str(data[name])} if name in data else {}
        task = build(name, **options)
        assert isinstance(task, get_task(name)) and isinstance(task, Task) and task.name == name
        if type(task).position_sweep:
            by_record: dict[str, list[int]] = {}
            for s in task.samples():
                by_record.setdefault(s.record_id, []).append(s.position)
            sweeps = {tuple(p) for p in by_record.values()}
            assert len(sweeps) == 1 and len(next(iter(sweeps))) >= 2, (name, sweeps)  # one sweep, the same for all
