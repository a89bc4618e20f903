import re

from hypothesis import given, settings
from hypothesis import strategies as st

from kbseek.core.markdown import chunk_document, find_sections, make_breadcrumb, normalize_heading


def chunks_of(text, size=800, overlap=100, title="Doc"):
    return chunk_document(
        text,
        body_offset=0,
        path="a/doc.md",
        document_id="d",
        title=title,
        category="a",
        chunk_size=size,
        overlap=overlap,
    )[1]


def own_text(chunks):
    """The text the chunks cover, each character once (overlaps removed)."""
    return "".join(c.text[c.overlap :] for c in chunks)


FAULT = """# 故障诊断流程规范

## 应急响应流程

### 1. 初步评估
确认影响范围。

### 2. 快速止血
回滚或降级。

## 根因分析方法

### 5-Why 分析法
连续追问为什么。
"""


def test_breadcrumbs_follow_the_heading_stack():
    chunks = chunks_of(FAULT)
    assert [c.breadcrumb for c in chunks] == [
        "故障诊断流程规范 > 应急响应流程 > 1. 初步评估",
        "故障诊断流程规范 > 应急响应流程 > 2. 快速止血",
        "故障诊断流程规范 > 根因分析方法 > 5-Why 分析法",
    ]
    first = chunks[0]
    assert (first.heading(1), first.heading(2), first.heading(3), first.heading(4)) == (
        "故障诊断流程规范",
        "应急响应流程",
        "1. 初步评估",
        None,
    )
    # bare headings (H1, H2 with no text of their own) join the first chunk below them
    assert first.text.startswith("# 故障诊断流程规范")
    assert own_text(chunks) == FAULT
    assert [c.anchor for c in chunks] == ["1-初步评估", "2-快速止血", "5-why-分析法"]


def test_hash_lines_in_fences_are_not_headings():
    text = "# Title\n\n```bash\n# 查看线程\ntop -H\n```\n\n~~~\n## not a heading\n~~~\n\n## Real\nx\n"
    sections = find_sections(text)
    assert [s.heading for s in sections] == ["Title", "Real"]


def test_setext_headings_and_skipped_levels():
    text = "发布规范\n====\n\n窗口\n----\n正文\n\n### 深\n内容\n\n### 深二\n内容\n\n## 回滚\n内容\n"
    chunks = chunks_of(text)
    assert [c.heading_path for c in chunks] == [
        ("发布规范", "窗口"),
        ("发布规范", "窗口", "深"),
        ("发布规范", "窗口", "深二"),
        ("发布规范", "回滚"),
    ]
    # '---' after a blank line is a thematic break, not a heading
    assert [s.heading for s in find_sections("a\n\n---\n\nb\n")] == [""]


def test_skipped_levels_pop_correctly():
    text = "# A\nx\n### C\nx\n### D\nx\n## B\nx\n"
    assert [c.heading_path for c in chunks_of(text)] == [("A",), ("A", "C"), ("A", "D"), ("A", "B")]


def test_preamble_and_missing_h1_get_the_title_in_the_breadcrumb():
    chunks = chunks_of("intro line\n\n## Mitigation\nsteps\n", title="Disk runbook")
    assert [c.breadcrumb for c in chunks] == ["Disk runbook", "Disk runbook > Mitigation"]
    assert chunks[0].anchor == ""


def test_duplicate_headings_get_unique_anchors():
    chunks = chunks_of("# T\n## 步骤\na\n## 步骤\nb\n## 步骤\nc\n")
    assert [c.anchor for c in chunks] == ["步骤", "步骤-1", "步骤-2"]


def test_long_chinese_section_splits_at_sentence_ends_with_overlap():
    sentence = "当服务器的CPU使用率持续超过阈值时需要先确认影响范围再决定是否扩容。"
    text = "# 长文\n\n" + sentence * 60 + "\n"
    chunks = chunks_of(text, size=300, overlap=60)
    assert len(chunks) > 5
    assert all(len(c.text) <= 300 for c in chunks)
    assert own_text(chunks) == text
    for c in chunks[:-1]:
        assert c.text.rstrip().endswith("。")
    assert all(c.overlap > 0 for c in chunks[1:])
    assert all(c.text[: c.overlap] == text[c.start : c.start + c.overlap] for c in chunks)


def test_code_blocks_and_tables_stay_whole():
    code = "```python\n" + "".join(f"x{i} = {i}  # 注释\n" for i in range(20)) + "```\n"
    table = "| a | b |\n|---|---|\n" + "".join(f"| {i} | 值{i} |\n" for i in range(15)) + "\n"
    text = "# T\n\n" + "前言。" * 50 + "\n\n" + code + "\n" + table + "结尾。\n"
    chunks = chunks_of(text, size=400, overlap=50)
    assert any(code in c.text for c in chunks)
    assert any(table.strip() in c.text for c in chunks)
    assert own_text(chunks) == text


def test_oversized_code_block_is_split_at_line_ends():
    code = "```\n" + "".join(f"line {i:04d} of a very long log excerpt\n" for i in range(100)) + "```\n"
    chunks = chunks_of("# T\n" + code, size=200, overlap=20)
    assert all(len(c.text) <= 200 for c in chunks)
    assert all(c.overlap == 0 for c in chunks)  # code is never repeated
    assert all(c.text.endswith("\n") for c in chunks)


def test_offsets_and_lines_point_into_the_file():
    text = "---\ntitle: t\n---\n# H\n\nbody line\n\n## S\nmore\n"
    body = text.index("# H")
    _, chunks = chunk_document(text, body_offset=body, path="p.md", document_id="d", title="t", category="c")
    for c in chunks:
        assert text[c.start : c.end] == c.text
        assert text.splitlines()[c.line_start - 1] == c.text.splitlines()[0]
    assert (chunks[0].line_start, chunks[-1].line_end) == (4, 9)


def test_whitespace_only_body_has_no_chunks():
    assert chunks_of("\n\n  \n") == []


def test_heading_normalisation_and_breadcrumbs():
    assert normalize_heading("### **ERR_TIMEOUT** `x` [链接](http://a)") == "### ERR_TIMEOUT x 链接"
    assert make_breadcrumb("T", ()) == "T"


def test_ids_are_deterministic_and_depend_on_content():
    first, again = chunks_of(FAULT), chunks_of(FAULT)
    assert [c.id for c in first] == [c.id for c in again]
    changed = chunks_of(FAULT.replace("回滚或降级", "扩容"))
    assert first[0].id == changed[0].id and first[1].id != changed[1].id


# -- property tests ----------------------------------------------------------------------------

words = st.sampled_from(["超时", "ERR_TIMEOUT", "重启", "HighCPUUsage", "jmap", "502", "排查", "the", "pod", "磁盘"])
sentence = (
    st.lists(words, min_size=1, max_size=12)
    .map(lambda ws: " ".join(ws))
    .flatmap(lambda s: st.sampled_from(["。", "！", "？", "；", ". ", ""]).map(lambda end: s + end))
)
paragraph = st.lists(sentence, min_size=1, max_size=30).map("".join)
heading = st.tuples(st.integers(1, 6), st.lists(words, min_size=1, max_size=3)).map(
    lambda t: ("#" * t[0] + " " + " ".join(t[1]), t[0], " ".join(t[1]))
)
code = st.lists(st.sampled_from(["# 注释", "## not heading", "kubectl get pod", "x = 1"]), max_size=30).map(
    lambda lines: "```\n" + "".join(line + "\n" for line in lines) + "```"
)
table = st.lists(words, min_size=1, max_size=20).map(
    lambda ws: "| k | v |\n|---|---|\n" + "".join(f"| {w} | {w} |\n" for w in ws).rstrip("\n")
)
block = st.one_of(paragraph, paragraph, code, table, heading.map(lambda h: h[0]))
document = st.lists(block, min_size=0, max_size=25).map(lambda bs: "\n\n".join(bs) + "\n")


def reference_stacks(text):
    """Heading paths by a simple independent reading (blocks are blank-line separated)."""
    stack, paths, in_code = [], [], False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
            continue
        match = re.match(r"^(#{1,6}) (.+)$", line)
        if match and not in_code:
            level = len(match.group(1))
            stack = [(lvl, h) for lvl, h in stack if lvl < level] + [(level, match.group(2))]
            paths.append(tuple(h for _, h in stack))
    return paths


@settings(max_examples=150, deadline=None)
@given(document, st.integers(100, 900))
def test_property_chunks_cover_the_body_within_the_limit(text, size):
    chunks = chunks_of(text, size=size, overlap=size // 5)
    if not text.strip():
        assert chunks == []
        return
    assert own_text(chunks) == text
    assert [c.index for c in chunks] == list(range(len(chunks)))
    for c in chunks:
        assert len(c.text) <= size
        assert text[c.start : c.end] == c.text


@settings(max_examples=150, deadline=None)
@given(document)
def test_property_breadcrumbs_match_the_heading_stack(text):
    chunks = chunks_of(text, size=800)
    expected = reference_stacks(text)
    seen = []
    for c in chunks:
        if c.heading_path and (not seen or seen[-1] != c.heading_path):
            seen.append(c.heading_path)
        assert c.breadcrumb.endswith(" > ".join(c.heading_path))
    # every chunk's path is one of the stacks, in document order; bare headings may be skipped
    position = -1
    for path in seen:
        position = expected.index(path, position + 1)  # raises if out of order or invented


@settings(max_examples=150, deadline=None)
@given(document)
def test_property_fences_stay_intact_unless_too_long(text):
    chunks = chunks_of(text, size=800)
    for c in chunks:
        fences = sum(1 for line in c.text.splitlines() if line.startswith("```"))
        oversized = any(len(block) > 800 for block in re.findall(r"```\n.*?```", text, re.S))
        assert fences % 2 == 0 or oversized


def test_blank_preamble_after_frontmatter_folds_into_the_first_section():
    text = "---\ntitle: t\n---\n\n# H1\n\n## Meaning\nx\n"
    _, chunks = chunk_document(
        text, body_offset=text.index("\n# H1") - 0, path="p.md", document_id="d", title="t", category="c"
    )
    assert [c.breadcrumb for c in chunks] == ["H1 > Meaning"]


def test_overlap_never_reaches_back_into_code():
    code = "```\n" + "# 注释\nkubectl get pod\n" * 4 + "```\n\n"
    prose = "超时 ERR_TIMEOUT 重试。" * 30 + "\n"
    chunks = chunks_of("# T\n\n" + code + prose, size=200, overlap=80)
    for c in chunks[1:]:
        assert "```" not in c.text[: c.overlap]
