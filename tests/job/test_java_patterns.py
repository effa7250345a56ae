"""Topic and group patterns decide as MirrorMaker 2's do: a corpus of Java patterns and names, decided by MM2's
own filter classes (DefaultTopicFilter, DefaultGroupFilter, from its jar) and by Java's Pattern where MM2 would
split the pattern at its commas (its `topics` is a list), against sparkmirror's reading (resource/javaregex.py).
What Python cannot match as Java does is refused by name, never matched differently."""
from __future__ import annotations

import json

import pytest

from sparkmirror.replication import GroupFilter, TopicFilter
from sparkmirror.resource.javaregex import JavaPatternError, compile_java

from .mm2java import run_java  # noqa: F401

NAMES = ["orders", "Orders", "ORDERS", "orders-1", "orders-12", "orders-123", "orders.eu", "orders_eu", "ordersXeu",
         "a.b", "a+b", "a", "aa", "ab", "abc", "ABC", "aBc", "x.internal", "x_internal", "billing", "billing.v2",
         "ü-group", "Ü", "g\nh", "g\rh", "g\u2028h", "g\u0085h", "a.b.c", "", "123", "a1b2", "topic", "t-9"]

SAME = [  # patterns Java and sparkmirror read alike (translated where they differ)
    "orders", "orders.*", "orders-[0-9]+", "orders-\\d{1,2}", "orders(-\\d+)?", "[a-z]+", "[^a-z]+", "\\w+",
    "\\W+", "\\s*", "a.b", "a\\.b", "(?i)orders", "ORD(?i)ers", "a(?i)b|c", "(?i:ab)c", "(?-i)abc",
    "\\Qa.b\\E", "\\Qa+b\\E", "x\\Q.\\Einternal", "\\p{Lower}+", "\\p{Upper}+", "\\p{Alpha}+", "\\p{Alnum}+",
    "[\\p{Lower}\\d-]+", "\\P{Lower}+", "\\p{Punct}", "a++", "a*+b?+c", "a*?b", "(?>a|ab)c", "(?:a|ab)c",
    "g.h", "(?s)g.h", "(?s:g.)h", "orders|billing", "(?<x>a)\\k<x>", "[.]internal", ".*\\.internal",
    "\\d+", "\\u00dc", "(?i)\\u00fc-group", "(?i)ü-group", "\\e", "a\\z", "^orders$", "\\bab\\b",
]
REFUSED = [  # valid Java that Python would read otherwise: refused with the construct named
    ("[a-z&&[^b]]+", "intersection"), ("[a[b]]", "union"), ("[a-c&&]", "intersection"), ("a\\Z", "\\Z"), ("\\p{L}+", "\\p{L}"),
    ("\\h", "\\h"), ("(?x)a b", "flags"), ("(?u)(?i)ü", "flags"), ("a\\R", "\\R"), ("\\x{41}", "\\x{"),
]


JAVA = """
import java.util.*;
import java.util.regex.*;
import org.apache.kafka.connect.mirror.*;

public class Decide {
    public static void main(String[] args) throws Exception {
        Scanner in = new Scanner(System.in, "UTF-8").useDelimiter("\\n");
        String[] names = in.next().split("\\t", -1);
        StringBuilder out = new StringBuilder();
        while (in.hasNext()) {
            String p = in.next();
            out.append(p.isEmpty() ? "" : "").append("[");
            Pattern compiled;
            try { compiled = Pattern.compile(p); }
            catch (PatternSyntaxException e) { out.append("\\"error\\"],"); continue; }
            DefaultTopicFilter topics = null; DefaultGroupFilter groups = null;
            if (!p.contains(",")) {
                topics = new DefaultTopicFilter(); topics.configure(Map.of("topics", p, "topics.exclude", ""));
                groups = new DefaultGroupFilter(); groups.configure(Map.of("groups", p, "groups.exclude", ""));
            }
            for (int i = 0; i < names.length; i++) {
                String n = names[i].replace("\\\\n", "\\n").replace("\\\\r", "\\r").replace("\\\\u2028", "\\u2028").replace("\\\\u0085", "\\u0085");
                boolean j = compiled.matcher(n).matches();
                if (topics != null && (topics.shouldReplicateTopic(n) != j || groups.shouldReplicateGroup(n) != j))
                    throw new IllegalStateException("MM2's filters and Pattern disagree on " + p + " / " + n);
                out.append(j ? "true" : "false").append(i + 1 < names.length ? "," : "");
            }
            out.append("],");
        }
        System.out.println("[" + (out.length() > 0 ? out.substring(0, out.length() - 1) : "") + "]");
    }
}
"""


def _escaped(name: str) -> str:
    return name.replace("\n", "\\n").replace("\r", "\\r").replace("\u2028", "\\u2028").replace("\u0085", "\\u0085")


@pytest.fixture(scope="module")
def java_decides(run_java):
    def decide(patterns: list[str]) -> list:
        stdin = "\t".join(_escaped(n) for n in NAMES) + "\n" + "\n".join(patterns) + "\n"
        return json.loads(run_java("Decide", JAVA, stdin=stdin))
    return decide


def test_sparkmirror_decides_as_mirrormaker_2(java_decides) -> None:
    java = java_decides(SAME)
    differ = []
    for pattern, decisions in zip(SAME, java):
        assert decisions != ["error"], f"{pattern!r} is no Java pattern: fix the corpus"
        compiled = compile_java(pattern)
        ours = [compiled.fullmatch(n) is not None for n in NAMES]
        differ += [(pattern, n, j) for n, j, o in zip(NAMES, decisions, ours) if j != o]
        # the filters the mirror uses read patterns the same way
        assert [TopicFilter(pattern).matches(n) for n in NAMES] == ours
        assert [GroupFilter(pattern).matches(n) for n in NAMES] == ours
    assert differ == [], differ
    assert sum(map(sum, java)) > 100  # the corpus matches something, not only nothing


def test_what_python_cannot_match_as_java_is_refused_by_name(java_decides) -> None:
    java = java_decides([p for p, _ in REFUSED])
    for (pattern, named), decisions in zip(REFUSED, java):
        assert decisions != ["error"], f"{pattern!r} is no Java pattern: fix the corpus"
        with pytest.raises(JavaPatternError) as e:
            compile_java(pattern)
        assert named in str(e.value) and repr(pattern) in str(e.value)
