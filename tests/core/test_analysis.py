import pytest

from kbseek.core.alertline import clean as clean_query
from kbseek.core.alertline import looks_like_alert
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
    line = (
        "2024-01-20T14:00:00.123Z ERROR [payment-api-7d9f8b6c5d-x2x4z] 10.0.3.17:8080 "
        "trace=4bf92f3577b34da6a3ce929d0e0e4736 req=123e4567-e89b-12d3-a456-426614174000 "
        "ERR_TIMEOUT calling {namespace}/{pod} {{ $labels.instance }}"
    )
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


# Pasted alert and log lines, in the formats they arrive in: the normaliser keeps what names the problem.
ALERT_LINES = [
    # Alertmanager (Slack/e-mail title), the default template
    (
        "[FIRING:1] HighCPUUsage (payment-gateway-7d9f8b6c5-x2k4p critical) instance=10.0.3.17:9100 namespace=prod "
        "value=97.3%",
        "HighCPUUsage (payment-gateway)",
    ),
    (
        "[RESOLVED] DiskSpaceUsageHigh (node-exporter-x7k2p warning) device=/dev/vdb1 mountpoint=/data",
        "DiskSpaceUsageHigh (node-exporter)",
    ),
    # label sets: the alert name, the service and the summary stay, place/time/severity go
    (
        'alertname=PaymentSuccessRateLow severity=critical summary="渠道 UNIONPAY 支付成功率低于 90%" '
        "startsAt=2026-11-05T14:02:11+08:00 fingerprint=3f9a1c0d7e2b",
        "PaymentSuccessRateLow 渠道 UNIONPAY 支付成功率低于",
    ),
    # Alertmanager webhook JSON
    (
        '{"status":"firing","labels":{"alertname":"KafkaConsumerLagHigh","consumergroup":"order-status-sync",'
        '"severity":"warning"},"startsAt":"2026-11-12T08:00:00Z"}',
        "KafkaConsumerLagHigh, order-status-sync",
    ),
    # Grafana: legacy and unified alerting
    ("[Alerting] order-service ORDER_STOCK_LOCK_FAILED rate alert", "order-service ORDER_STOCK_LOCK_FAILED rate alert"),
    (
        "[FIRING:1] RedisClusterDown redis-order\nLabels:\n - alertname = RedisClusterDown\n"
        " - instance = 10.0.3.21:6379\n"
        "Source: https://grafana.example.com/alerting/grafana/bd7f2c/view",
        "RedisClusterDown redis-order\nRedisClusterDown",
    ),
    # PagerDuty
    ("[Triggered] #4187: DiskSpaceUsageHigh on node-prod-07 - Urgency: high", "DiskSpaceUsageHigh on node-prod-07"),
    # Chinese alert bodies (DingTalk / WeCom), full-width colons included
    (
        "【告警】[P1] 支付网关\n告警名称：PaymentSuccessRateLow\n告警级别：严重\n实例：10.0.3.17:9100\n当前值：86.4%\n"
        "触发时间：2026-11-12 21:03:10",
        "支付网关\nPaymentSuccessRateLow",
    ),
    # Prometheus rule text
    (
        "- alert: KubePodCrashLooping\n  expr: rate(kube_pod_container_status_restarts_total[15m]) > 0\n  for: 15m\n"
        "  labels:\n    severity: warning",
        "KubePodCrashLooping\nrate (kube_pod_container_status_restarts_total) > 0",
    ),
    # Kubernetes events (kubectl describe / get events)
    (
        "Warning  BackOff  3m12s (x14 over 9m)  kubelet  Back-off restarting failed container app in pod "
        "order-service-6c8f9d7b4-kq2vn_order(4c1e7a52-9b0d-4f3e-8a61-2d5c7e9f1b30)",
        "BackOff kubelet Back-off restarting failed container app in pod order-service_order",
    ),
    # log lines: logfmt, Java, nginx, syslog
    (
        'level=error ts=2026-11-12T07:41:09.512Z caller=store.go:214 msg="Error 1040: Too many connections"',
        "Error 1040: Too many connections",
    ),
    (
        "2026-11-08 10:21:33.118 ERROR [account-svc-5c6d7f8b9-qk2lm] [traceId=ab12cd34ef567890] HikariPool-1 - "
        "Connection is not available, request timed out after 30000ms.",
        "[account-svc] HikariPool-1 - Connection is not available, request timed out after.",
    ),
    (
        "2026/11/02 03:14:07 [error] 23141#23141: *918273 upstream prematurely closed connection, client: 10.2.3.4, "
        'server: api.example.com, request: "POST /api/order/create HTTP/1.1"',
        "upstream prematurely closed connection, /api/order/create",
    ),
    (
        "Nov 13 04:12:55 app-prod-03 java[23817]: java.io.IOException: No space left on device",
        "java: java.io.IOException: No space left on device",
    ),
]


@pytest.mark.parametrize("line, expected", ALERT_LINES)
def test_alert_and_log_lines_are_reduced_to_what_names_the_problem(line, expected):
    assert clean_query(line) == expected
    assert clean_query(expected) in (expected, clean_query(expected))  # cleaning again changes nothing new
    assert clean_query(clean_query(line)) == clean_query(line)


@pytest.mark.parametrize(
    "question",
    [
        "ERR_TIMEOUT 支付超时怎么办",
        "HighCPUUsage 告警 warning 和 critical 的阈值是多少",
        "MySQL ERROR 1205 Lock wait timeout exceeded",
        "Kafka consumer lag keeps growing on a few partitions",
        "Redis INFO commandstats 怎么看",
        "max_fails=3 fail_timeout=30s 是什么意思",  # one config line is a question about it, not an alert
    ],
)
def test_questions_are_left_exactly_as_asked(question):
    assert not looks_like_alert(question)
    assert clean_query(question) == question


def test_a_line_of_nothing_but_noise_is_kept_rather_than_emptied():
    assert (
        clean_query("[FIRING:1] instance=10.0.3.17:9100 value=97.3%")
        == "[FIRING:1] instance=10.0.3.17:9100 value=97.3%"
    )


def test_the_status_prefix_no_longer_changes_the_tokens(analyzer):
    # the tokens that decide coverage: with and without [FIRING:1], the alert name and service only
    bare = "HighCPUUsage (payment-gateway-7d9f8b6c5-x2k4p critical) instance=10.0.3.17:9100 namespace=prod value=97.3%"
    assert (
        analyzer.tokens(clean_query("[FIRING:1] " + bare))
        == analyzer.tokens(clean_query(bare))
        == ["highcpuusage", "high", "cpu", "usag", "payment-gateway", "payment", "gateway"]
    )


def test_tokens_are_one_string_per_word():
    # the indexes and a refresh's token lists for thousands of chunks then hold each word once
    analyzer = Analyzer()
    text = "磁盘空间不足 DiskSpaceUsageHigh"
    first, second = analyzer.tokens(text), analyzer.tokens(text)
    assert first == second and all(a is b for a, b in zip(first, second, strict=True))
