import pytest

from kbseek.core.frontmatter import first_meaningful_line, parse_frontmatter
from kbseek.errors import FrontmatterError


def parse(text: str):
    return parse_frontmatter(text, source="api/x.md", file_name="x.md")


def test_valid_frontmatter_with_all_fields_and_extras():
    fm = parse(
        "---\ntitle: 支付网关错误码定义\nkeywords: [ERR_TIMEOUT, 超时, 支付网关]\n"
        "summary: 记录了错误码\ncategory: api\nversion: 1.2\nauthor: 平台组\n"
        "service: payment\nupdated: 2026-01-02\n---\n# 正文\n"
    )
    assert fm.title == "支付网关错误码定义"
    assert fm.keywords == ("ERR_TIMEOUT", "超时", "支付网关")
    assert fm.category == "api"
    assert fm.fields["version"] == "1.2"  # numbers in version/author are kept as text
    assert fm.fields["service"] == "payment"
    assert fm.fields["updated"] == "2026-01-02"  # dates become ISO strings (JSON-safe)
    assert fm.missing == ()
    assert fm.body_line == 11


@pytest.mark.parametrize(
    "raw, expected",
    [
        ('"ERR_TIMEOUT, 超时"', ("ERR_TIMEOUT", "超时")),
        ("ERR_TIMEOUT，超时、支付网关", ("ERR_TIMEOUT", "超时", "支付网关")),
        ("[a, A, ' b ', '']", ("a", "b")),
        ("[404, 502]", ("404", "502")),
    ],
)
def test_keywords_list_or_comma_separated(raw, expected):
    fm = parse(f"---\ntitle: t\nkeywords: {raw}\nsummary: s\n---\n")
    assert fm.keywords == expected


def test_missing_fields_fall_back_but_keywords_are_never_invented():
    fm = parse("---\ntitle: \n---\n\n# Redis 连接池耗尽\n\n```\n# not a title\n```\n- **现象**: 连接超时\n")
    assert fm.missing == ("title", "keywords", "summary")
    assert (fm.title, fm.title_source) == ("Redis 连接池耗尽", "h1")
    assert (fm.summary, fm.summary_source) == ("现象: 连接超时", "first_line")
    assert fm.keywords == ()


def test_no_frontmatter_and_no_h1_uses_file_name():
    fm = parse("## only h2\n\nplain line\n")
    assert (fm.title, fm.title_source) == ("x", "filename")
    assert fm.summary == "plain line"
    assert fm.body_offset == 0


def test_malformed_yaml_names_file_and_line():
    with pytest.raises(FrontmatterError) as info:
        parse("---\ntitle: x\nkeywords: [a, b\nsummary: y\n---\nbody\n")
    assert info.value.line == 3
    assert str(info.value).startswith("api/x.md:3: malformed YAML")


def test_bad_indentation_line():
    with pytest.raises(FrontmatterError) as info:
        parse("---\ntitle: x\nsummary: y\n  bad: indent\n---\n")
    assert info.value.line == 4


@pytest.mark.parametrize(
    "text, message",
    [
        ("---\n- a\n- b\n---\n", "must be a mapping"),
        ("---\ntitle: x\n", "never closed"),
        ("---\ntitle: x\nkeywords: 42\nsummary: s\n---\n", "keywords"),
        ("---\ntitle: x\nkeywords: {a: 1}\nsummary: s\n---\n", "keywords"),
        ("---\ntitle: [a, b]\n---\n", "title"),
        ("---\ntitle: x\nkeywords: [[a]]\n---\n", "plain text"),
    ],
)
def test_wrong_shapes_are_errors_naming_the_file(text, message):
    with pytest.raises(FrontmatterError) as info:
        parse(text)
    assert message in str(info.value)
    assert "api/x.md" in str(info.value)


def test_unsafe_yaml_tags_are_refused():
    with pytest.raises(FrontmatterError):
        parse("---\ntitle: !!python/object/apply:os.system ['echo hi']\n---\n")


def test_crlf_frontmatter():
    fm = parse("---\r\ntitle: t\r\nkeywords: [k]\r\nsummary: s\r\n---\r\nbody\r\n")
    assert fm.title == "t" and fm.missing == ()
    assert fm.body_line == 6


def test_empty_frontmatter_block():
    fm = parse("---\n---\nhello\n")
    assert fm.missing == ("title", "keywords", "summary")
    assert fm.summary == "hello"


def test_first_meaningful_line_skips_markup():
    body = "# T\n\n<!-- c -->\n| a | b |\n|---|---|\n> **注意**: 先止血\n"
    assert first_meaningful_line(body) == "注意: 先止血"


def test_setext_h1_stands_in_for_the_title():
    fm = parse("发布规范\n====\n\n```\n# 不是标题\n```\n正文第一行\n")
    assert (fm.title, fm.title_source, fm.summary) == ("发布规范", "h1", "正文第一行")
