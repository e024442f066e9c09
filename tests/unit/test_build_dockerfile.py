"""The Dockerfile as Docker's builder reads it: BuildKit's parser, the instructions' checks, the
word expansion and .dockerignore's patterns (tables of inputs, no I/O)."""

from __future__ import annotations

import re

import pytest

from hydria.imagebuild import dockerfile, ignore
from hydria.imagebuild.words import SubstitutionError, expand, expand_words

VARIABLES = {"A": "1", "EMPTY": "", "P": "/opt", "SPACED": "two words"}


@pytest.mark.parametrize(("word", "expanded"), [
    ("$A", "1"),
    ("${A}b", "1b"),
    ("$Ab", ""),  # the name is Ab
    ('"$SPACED"', "two words"),
    ("'$A'", "$A"),
    ('"a\\"b"', 'a"b'),
    ('"a\\b"', "a\\b"),  # in double quotes the escape only escapes " $ and itself
    ("a\\ b", "a b"),
    ("\\$A", "$A"),
    ("${EMPTY:-default}", "default"),
    ("${EMPTY-default}", ""),
    ("${UNSET-default}", "default"),
    ("${A:+alt}", "alt"),
    ("${EMPTY:+alt}", ""),
    ("${EMPTY+alt}", "alt"),
    ("${UNSET:-$P/bin}", "/opt/bin"),
    ("$", "$"),
    ("cost: 5$", "cost: 5$"),
    ("$UNSET", ""),
    ("${P}/bin:$PATH", "/opt/bin:"),
])
def test_words_expand_as_docker_expands_them(word: str, expanded: str) -> None:
    assert expand(word, VARIABLES) == expanded


def test_the_escape_directive_changes_the_escape_character() -> None:
    assert expand("a`$A", VARIABLES, escape="`") == "a$A"
    assert expand("C:\\dir", VARIABLES, escape="`") == "C:\\dir"


def test_words_split_at_whitespace_outside_quotes() -> None:
    assert expand_words('a  "b c" $A \'\' $EMPTY', VARIABLES) == ["a", "b c", "1", "", ""]


@pytest.mark.parametrize(("word", "message"), [
    ("${UNSET:?is required}", "UNSET: is required"),
    ("${EMPTY:?}", "EMPTY: is not set"),
    ("${}", "without a variable name"),
    ("${A:=x}", "bad substitution"),
    ("${A", "missing }"),
    ("'open", "unmatched '"),
    ('"open', 'unmatched "'),
])
def test_bad_substitutions_are_errors(word: str, message: str) -> None:
    with pytest.raises(SubstitutionError, match=message.replace("$", "\\$").replace("{", "\\{")):
        expand(word, VARIABLES)


def test_stages_global_args_and_instructions() -> None:
    parsed = dockerfile.parse("""# escape=`
ARG BASE=debian
FROM ${BASE} AS Build
RUN echo a `
    b
COPY --from=build --chown=1:1 a b /dst/
ONBUILD RUN echo later
FROM scratch
COPY --from=0 /x /x
""")
    assert parsed.escape == "`"
    assert [a.arguments for a in parsed.global_args] == [("BASE=debian",)]
    first, second = parsed.stages
    assert (first.name, first.base, second.name, second.base) == ("build", "${BASE}", None, "scratch")
    run, copy, onbuild = first.instructions
    assert run.arguments == ("echo a     b",) and run.line == 4 and run.where == "Dockerfile:4"
    assert copy.flags == {"from": ["build"], "chown": ["1:1"]} and copy.arguments == ("a", "b", "/dst/")
    assert onbuild.trigger is not None and onbuild.trigger.keyword == "RUN"
    assert parsed.stage("BUILD") is first and parsed.stage("1") is second and parsed.stage("other") is None


def test_heredocs_reach_the_instruction() -> None:
    (stage,) = dockerfile.parse("FROM x\nRUN <<EOF\necho hi\nEOF\n").stages
    (run,) = stage.instructions
    assert [(h.name, h.content) for h in run.heredocs] == [("EOF", "echo hi\n")]


@pytest.mark.parametrize(("text", "message"), [
    ("", "file with no instructions"),
    ("# only a comment\n", "file with no instructions"),
    ("RUN true\n", "Dockerfile:1: RUN: comes before the first FROM"),
    ("FROM a\nFROOM b\n", "Dockerfile:2: unknown instruction: FROOM"),
    ("FROM a\nCOPY --frm=x a b\n", "Dockerfile:2: COPY: unknown flag: --frm"),
    ("FROM a\nCOPY --chown=1 --chown=2 a b\n", "--chown given twice"),
    ("FROM a\nCOPY a\n", "COPY: needs a source and a destination"),
    ("FROM a\nSHELL /bin/bash\n", "SHELL: takes the JSON form"),
    ("FROM a AS x\nFROM b AS x\n", "the stage name 'x' is used twice"),
    ("FROM a AS 1x\n", "invalid stage name '1x'"),
    ("FROM a b\n", "FROM: takes IMAGE [AS NAME]"),
    ("FROM a\nONBUILD FROM b\n", "ONBUILD: FROM is not allowed as an ONBUILD trigger"),
    ("FROM a\nRUN <<EOF\nunterminated\n", "unterminated heredoc"),
    ("FROM a\nRUN\x00\n", "NUL byte"),
])
def test_a_dockerfile_docker_refuses_is_refused_with_its_line(text: str, message: str) -> None:
    with pytest.raises(dockerfile.DockerfileError, match=re.escape(message)):
        dockerfile.parse(text)


@pytest.mark.parametrize(("patterns", "path", "rule"), [
    ("*.key", "secret.key", "*.key"),
    ("*.key", "sub/secret.key", None),  # a pattern without ** matches at the root only
    ("**/*.key", "sub/deep/secret.key", "**/*.key"),
    ("build", "build/out/file", "build"),  # a folder's contents go with it
    ("/build", "build", "/build"),
    ("./build", "build", "./build"),
    ("data/*\n!data/keep.txt", "data/keep.txt", None),
    ("data/*\n!data/keep.txt", "data/other.txt", "data/*"),
    ("*\n!src", "src/a.py", None),
    ("ca?e", "cafe", "ca?e"),
    ("[a-c].txt", "b.txt", "[a-c].txt"),
    ("[!a-c].txt", "b.txt", None),
    ("# comment\n\n", "anything", None),
    ("a\\*b", "a*b", "a\\*b"),
])
def test_dockerignore_patterns_match_as_docker_matches_them(patterns: str, path: str, rule: str | None) -> None:
    assert ignore.excluding_rule(path, ignore.parse(patterns)) == rule
