"""Pasted alert and log lines reduced to what identifies the problem: the alert name, the service, the message.

An agent's most natural query is the alert it was paged with. Left as it is, such a line is mostly noise to
retrieval: the status (``[FIRING:1]``), label names (``instance=``, ``namespace=``), values that name a place or
a moment (``10.0.3.17:9100``, ``prod``, ``2026-11-02T03:20:41Z``), severities, pod-name hashes and measured values.
Every such word the knowledge base does not hold lowers a chunk's share of the query's weight (the coverage
signal of the relevance levels) and blurs the query's vector, until an exact alert-name match is no longer
confident. ``clean`` removes that noise from text that looks like an alert or a log line and leaves any other
text exactly as it is:

* status markers: Alertmanager ``[FIRING:3]`` / ``[RESOLVED]``, Grafana ``[Alerting]`` / ``[OK]`` /
  ``[No Data]``, PagerDuty ``[Triggered]`` / ``#1234``, Chinese ``【告警】`` / ``[已恢复]``, ``[P1]``;
* ``label=value`` pairs (also ``label="value"``, JSON ``"label": "value"``, logfmt, PromQL matchers, and
  ``label: value`` for known labels, Chinese ones included): a label naming a place, a time, a measure or a
  severity goes with its value (``instance``, ``namespace``, ``pod``, ``value``, ``severity``, ``startsAt``,
  ``告警级别``, ``触发时间``…); a label whose value identifies the problem loses only its name (``alertname``,
  ``service``, ``job``, ``code``, ``reason``, ``msg``, ``summary``, ``告警名称``…); any other label keeps its
  name (it may be a parameter such as ``max_fails``) and drops a bare number;
* severities and log levels (``critical``, ``WARN``, ``[error]``, a Kubernetes event's ``Normal``), but not
  ``ERROR 1205``;
* pod-name hashes (``payment-gateway-7d9f8b6c5-x2k4p`` → ``payment-gateway``), ``pod/`` prefixes, ports,
  URLs, HTTP methods and versions, counters (``23141#23141``, ``*918273``, ``(x12 over 10m)``);
* percentages, decimals, durations, ids of six digits or more, and the analyser's noise (IPs, UUIDs,
  timestamps, hashes, template placeholders).

>>> clean("[FIRING:1] HighCPUUsage (payment-gateway-7d9f8b6c5-x2k4p critical) "
...       "instance=10.0.3.17:9100 namespace=prod value=97.3%")
'HighCPUUsage (payment-gateway)'
>>> clean("ERR_TIMEOUT 支付超时怎么办")  # not an alert line: unchanged
'ERR_TIMEOUT 支付超时怎么办'
"""

from __future__ import annotations

import re
import unicodedata

from kbseek.core.alertlabels import LEVEL_LABELS, NOISE_LABELS, VALUE_LABELS

_NOISE = re.compile(
    r"""
    \{\{.*?\}\}                                            # {{ $labels.instance }}
  | \$labels\.\w+ | \$value\b
  | \{[^{}\s]{1,60}\}                                      # {namespace}
  | \b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b   # UUID
  | \b\d{4}-\d{2}-\d{2}(?:[T\s]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\b
  | \b\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\b                      # 14:00:00.123
  | \b\d{1,3}(?:\.\d{1,3}){3}(?::\d{1,5})?\b               # IPv4[:port]
  | \b(?:[0-9a-f]{1,4}:){3,7}[0-9a-f]{1,4}\b               # IPv6
  | \b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{12,}\b     # hashes, trace ids
    """,
    re.IGNORECASE | re.VERBOSE,
)


def strip_noise(text: str) -> str:
    """Blank out IPs, UUIDs, timestamps, hashes and template placeholders (in documents and queries alike)."""
    return _NOISE.sub(" ", text)


_KNOWN = NOISE_LABELS | LEVEL_LABELS | VALUE_LABELS

_STATUS_WORDS = (
    r"firing|resolved|alerting|ok|no[ _]?data|pending|normal|triggered|acknowledged|acked|problem|"
    r"recovery|recovered|alert|告警|告警中|告警触发|报警|触发|故障|恢复|已恢复|告警恢复|p[0-5]|s[1-4]"
)
_LEVEL_WORDS = r"critical|crit|warning|warn|error|err|info|information|debug|trace|fatal|notice|severe|emerg"
_STATUS_OR_LEVEL = re.compile(rf"(?:{_STATUS_WORDS}|{_LEVEL_WORDS})", re.IGNORECASE)
_STATUS = re.compile(rf"[\[【(](?:{_STATUS_WORDS})(?:\s*:\s*\d+)?[\]】)]", re.IGNORECASE)
_BRACKET_LEVEL = re.compile(rf"[\[<(]\s*(?:{_LEVEL_WORDS})\s*[\]>)]", re.IGNORECASE)
_VALUE = r"(?P<value>\"[^\"]*\"|'[^']*'|[^\s,;(){}\[\]\"']*)"  # a nested object or list is not a value
_KEY_EQ = re.compile(
    rf"(?<![\w.\-])[\"']?(?P<key>[A-Za-z_\u4e00-\u9fff][\w.\-\u4e00-\u9fff]{{0,60}})[\"']?"
    rf"[ \t]?(?:=~|!~|!=|=)[ \t]?{_VALUE}"
)
_KEY_COLON = re.compile(
    rf"(?<![\w.\-/])[\"']?(?P<key>[A-Za-z_\u4e00-\u9fff][\w.\-\u4e00-\u9fff]{{0,60}})[\"']?[ \t]?:(?!//)[ \t]*{_VALUE}"
)
_LEVEL_WORD = re.compile(
    r"(?<![\w.\-/])(?:(?i:critical|crit|warning|warn|info|debug|fatal|notice|severe|emerg)|ERROR|ERR|Error|ALERT|"
    r"TRIGGERED|ACKNOWLEDGED|RESOLVED|FIRING)(?![\w\-/])(?!\s*:?\s*\d)"
)
_EVENT_TYPE = re.compile(r"(?m)^\s*(?:Normal|Warning)(?=\s+[A-Z][A-Za-z]+\b)")
_URL = re.compile(r"\b[a-z][a-z0-9+.\-]{0,20}://[^\s\"'<>]+", re.IGNORECASE)
_HTTP = re.compile(r"\b(?:GET|POST|PUT|DELETE|PATCH|HEAD|OPTIONS)\s+(?=/)|\bHTTP/\d(?:\.\d)?\b")
_COUNTERS = re.compile(r"(?<![\w#])#\d+\b|\b\d+#\d+\b|(?<![\w*])\*\d+\b|\(x\d+ over [^)]*\)")
# Kubernetes names: a ReplicaSet hash then a pod suffix (or a suffix alone), from its alphabet, with a digit
_K8S_NAME = re.compile(r"(?<![a-z0-9\-])[a-z0-9][a-z0-9\-]*(?![a-z0-9\-])")  # then split, not backtracked
_RS_HASH = re.compile(r"(?=.*\d)[bcdfghjklmnpqrstvwxz2456789]{6,10}")
_POD_SUFFIX = re.compile(r"[bcdfghjklmnpqrstvwxz2456789]{5}")
_RESOURCE = re.compile(
    r"(?<![\w/])(?:pods?|nodes?|deployments?|deploy|statefulsets?|daemonsets?|services?|svc|"
    r"replicasets?|rs|jobs?|namespaces?)/(?=\w)",
    re.IGNORECASE,
)
_PORT = re.compile(r"(?<=[a-z0-9]):\d{2,5}(?![\w.])", re.IGNORECASE)
_NUMBERS = re.compile(
    r"(?<![\w.])(?:\d+(?:\.\d+)?\s?%|\d+\.\d+|(?:\d+(?:\.\d+)?(?:ms|us|µs|ns|s|m|h|d|w|min|mins|sec|secs))+|\d{6,})"
    r"(?!\w|\.\w)",
    re.IGNORECASE,
)
_SLASH_DATE = re.compile(r"\b\d{4}/\d{2}/\d{2}\b|(?<![\w.:])[+-]\d{2}:?\d{2}(?![\w.:])")
_SHORT_HASH = re.compile(r"(?<![\w\-])(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{8,}(?![\w\-])", re.IGNORECASE)
_SYSLOG_TIME = re.compile(
    r"\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\s+\d{1,2}\s+\d{2}:\d{2}:\d{2}"
    r"(?:\s+[\w.\-]+(?=\s))?"
)  # and the host that follows
_PID = re.compile(r"(?<=\w)\[\d+\]")  # java[23817]
_GLOG = re.compile(r"(?m)^\s*[IWEF]\d{4}\s+\d{2}:\d{2}:\d{2}(?:\.\d+)?\s+\d+\s+[\w.\-]+:\d+\]")
_TIMESTAMP_START = re.compile(
    r"^\s*(?:\d{4}[-/]\d{2}[-/]\d{2}|\d{2}:\d{2}:\d{2}|[IWEF]\d{4}\s|"
    r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\s+\d{1,2}\s)"
)
_PAIR_HINT = re.compile(r"(?<![\w.\-])([\w.\-]+)=\S")
_ALERT_HINT = re.compile(
    r"(?i:alertname|severity|level|instance|namespace|pod|startsat)\s?=|(?i:[\"']?(?:alertname|severity|startsat)[\"']?\s?:)|"
    r"(?m:^\s*-?\s*alert:\s*\w)|(?:告警名称|告警级别|告警内容|触发时间|告警时间)\s*:|"
    r"(?m:^\s*(?:Normal|Warning)\s+[A-Z][A-Za-z]+\s)|\(x\d+ over "
)
_TIDY = re.compile(r"\(\s*[,;:\-/|]*\s*\)|\[\s*[,;:\-/|]*\s*\]|\{\s*[,;:\-/|]*\s*\}|\"\s*\"|'\s*'|【\s*】")


def looks_like_alert(text: str) -> bool:
    """Whether ``text`` reads as an alert notification, a rule, an event or a log line rather than a question.

    >>> looks_like_alert("[Triggered] #4312: KafkaConsumerLagHigh"), looks_like_alert("Kafka 消费积压怎么办")
    (True, False)
    """
    text = unicodedata.normalize("NFKC", text)
    return bool(
        _STATUS.search(text)
        or _BRACKET_LEVEL.search(text)
        or _TIMESTAMP_START.match(text)
        or _ALERT_HINT.search(text)
        or _labelled(_PAIR_HINT.findall(text))
    )


def _labelled(keys: list[str]) -> bool:
    """Three ``k=v`` pairs, or two with a known label: a label set, not a question about one setting."""
    return len(keys) >= 3 or (len(keys) >= 2 and any(k.lower().replace("-", "_") in _KNOWN for k in keys))


def clean(text: str, *, pasted: bool | None = None) -> str:
    """``text`` without alert and log noise when it looks like an alert or log line (``pasted``, when the caller
    has judged that already with ``looks_like_alert``); otherwise unchanged.

    Never returns an empty query: when nothing but noise is left, ``text`` comes back as it was.

    >>> clean("2026-11-08 10:21:33.118 ERROR [account-svc-5c6d7f8b9-qk2lm] HikariPool-1 - Connection is not available")
    '[account-svc] HikariPool-1 - Connection is not available'
    >>> clean("告警名称: HighCPUUsage\\n告警级别: 严重\\n实例: 10.0.3.17:9100\\n当前值: 97.3%")
    'HighCPUUsage'
    >>> clean("level=error ts=2026-11-02T03:20:41Z caller=db.go:88 msg=\\"ERROR 1205 Lock wait timeout exceeded\\"")
    'ERROR 1205 Lock wait timeout exceeded'
    """
    original = text
    text = unicodedata.normalize("NFKC", text)
    if not (looks_like_alert(text) if pasted is None else pasted):
        return original
    text = _URL.sub(" ", text)
    text = _GLOG.sub(" ", text)
    text = _SYSLOG_TIME.sub(" ", text)
    text = _PID.sub("", text)
    text = _STATUS.sub(" ", text)
    text = _BRACKET_LEVEL.sub(" ", text)
    text = _KEY_EQ.sub(lambda m: _pair(m, any_key=True), text)
    text = _KEY_COLON.sub(lambda m: _pair(m, any_key=False), text)
    text = _EVENT_TYPE.sub(" ", text)
    text = _LEVEL_WORD.sub(" ", text)
    text = _HTTP.sub(" ", text)
    text = _COUNTERS.sub(" ", text)
    text = _RESOURCE.sub("", text)
    text = _K8S_NAME.sub(_workload, text)
    text = strip_noise(text)
    text = _SLASH_DATE.sub(" ", text)
    text = _SHORT_HASH.sub(" ", text)
    text = _PORT.sub(" ", text)
    text = _NUMBERS.sub(" ", text)
    text = _tidy(text)
    return text if re.search(r"[^\W_]", text) else original


def _pair(match: re.Match[str], *, any_key: bool) -> str:
    key = match.group("key")
    label = key.lower().replace("-", "_")
    if label not in _KNOWN:
        if not any_key:
            return match.group(0)  # ``word: …`` is prose unless the word is a known label
        value = _unquote(match.group("value"))
        return f" {key} " if re.fullmatch(r"[\d.]*", value) or _STATUS_OR_LEVEL.fullmatch(value) else f" {key} {value} "
    value = _unquote(match.group("value"))
    if label in NOISE_LABELS or label in LEVEL_LABELS or _STATUS_OR_LEVEL.fullmatch(value):
        return " "
    return f" {value} "


def _workload(match: re.Match[str]) -> str:
    """A pod's name without its ReplicaSet hash and suffix (``payment-gateway-7d9f8b6c5-x2k4p`` →
    ``payment-gateway``), or a DaemonSet pod's without its suffix; Kubernetes draws both from consonants and
    digits. Any other name is returned as it is."""
    name = match.group(0)
    parts = name.split("-")
    if len(parts) >= 3 and _POD_SUFFIX.fullmatch(parts[-1]) and _RS_HASH.fullmatch(parts[-2]):
        return "-".join(parts[:-2])
    if len(parts) >= 2 and _POD_SUFFIX.fullmatch(parts[-1]) and any(c.isdigit() for c in parts[-1]):
        return "-".join(parts[:-1])
    return name


def _unquote(value: str) -> str:
    return value[1:-1] if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'" else value


def _tidy(text: str) -> str:
    """Spaces collapsed, brackets and separators left empty by the removals dropped, noise-only lines dropped."""
    lines = []
    for line in text.splitlines():
        for _ in range(3):  # brackets emptied by an earlier pass may nest
            line = _TIDY.sub(" ", line)
        line = re.sub(r"[{}]+", " ", line)  # JSON and label-set braces
        line = re.sub(r"\s+", " ", line)
        line = re.sub(r"(?:\s*[,;|]\s*){2,}", ", ", line)
        line = re.sub(r"\s*[,;]\s*(?=[)\]}】])|(?<=[(\[{【])\s*[,;]?\s*|\s+(?=[)\]}】,;.])", "", line)
        line = line.strip(" ,;:|-=>/")
        if re.search(r"[^\W_]", line):
            lines.append(line)
    return "\n".join(lines)
