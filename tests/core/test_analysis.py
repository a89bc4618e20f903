import pytest

from kbseek.core.analysis import Analyzer, identifier_tokens


@pytest.fixture(scope="module")
def analyzer():
    return Analyzer(["支付网关", "CPU使用率", "Too many connections", "熔断降级"])


@pytest.mark.parametrize(
    "text, expected",
    [
        ("ERR_TIMEOUT", ["err_timeout", "err", "timeout"]),
        ("HighCPUUsage", ["highcpuusage", "high", "cpu", "usag"]),
        ("ORA-00600", ["ora-00600", "ora", "00600"]),
        ("max.poll.interval.ms", ["max.poll.interval.ms", "max", "poll", "interval", "ms"]),
        ("ＥＲＲ＿ＴＩＭＥＯＵＴ", ["err_timeout", "err", "timeout"]),
        ("k8s v1beta1", ["k8s", "v1beta1"]),
    ],
)
def test_identifiers_whole_and_split(analyzer, text, expected):
    assert analyzer.tokens(text) == expected


def test_http_status_pairs(analyzer):
    tokens = analyzer.tokens("HTTP 502 Bad Gateway")
    assert {"http", "502", "http_502", "bad", "gateway"} <= set(tokens)


def test_chinese_segmentation_keeps_dictionary_terms(analyzer):
    tokens = analyzer.tokens("支付网关超时，触发熔断降级")
    assert "支付网关" in tokens and "熔断降级" in tokens and "超时" in tokens
    assert Analyzer().tokens("支付网关超时").count("支付网关") == 0  # without the dictionary


def test_mixed_script_and_multiword_phrases(analyzer):
    tokens = analyzer.tokens("CPU使用率持续超过80%，MySQL 报 Too many connections")
    assert "cpu使用率" in tokens and "too many connections" in tokens
    assert {"cpu", "mysql", "80", "持续"} <= set(tokens)


def test_stopwords_and_question_words_dropped(analyzer):
    assert analyzer.tokens("the pod is down, 这个服务怎么办？") == ["pod", "down", "服务"]


def test_noise_in_pasted_alert_lines_is_removed(analyzer):
    line = ("2024-01-20T14:00:00.123Z ERROR [payment-api-7d9f8b6c5d-x2x4z] 10.0.3.17:8080 "
            "trace=4bf92f3577b34da6a3ce929d0e0e4736 req=123e4567-e89b-12d3-a456-426614174000 "
            "ERR_TIMEOUT calling {namespace}/{pod} {{ $labels.instance }}")
    tokens = analyzer.tokens(line)
    assert tokens == ["error", "payment", "api", "trace", "req", "err_timeout", "err", "timeout", "call"]


def test_version_follows_the_dictionary():
    a = Analyzer(["支付网关"])
    version = a.version
    assert a.set_words(["支付网关"]) == set() and a.version == version
    changed = a.set_words(["支付网关", "熔断降级"])
    assert changed == {"熔断降级"} and a.version != version
    assert a.set_words(["熔断降级"]) == {"支付网关"}
    assert "支付网关" not in a.tokens("支付网关")


def test_identifier_helper_drops_hash_parts():
    assert identifier_tokens("pod-7d9f8b6c5d4") == ["pod"]
    assert identifier_tokens("plain") == ["plain"]
