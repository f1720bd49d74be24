"""The storage config's ``console.masking`` rules: checked at load (errors name the key), and what they mask."""
from __future__ import annotations

import json

import pytest

from storage_engine.config import StorageConfig
from storage_engine.config_file import config_from_mapping, load_config
from storage_engine.errors import ConfigError
from storage_engine.masking import MASK, mask_value, rules_for
from tests.paths import REPO

pytestmark = pytest.mark.unit


def with_console(console) -> StorageConfig:
    return config_from_mapping({"broker": {"log.dirs": ["/data/dir-a"]}, "console": console}, base_dir="/")


def test_no_console_section_masks_nothing():
    assert config_from_mapping({"broker": {"log.dirs": ["/data/dir-a"]}}, base_dir="/").masking == ()
    assert with_console(None).masking == () and with_console({"masking": None}).masking == ()


def test_the_demo_config_masks_the_email_of_user_emails():
    config = load_config(REPO / "include" / "config" / "storage.yaml")
    assert rules_for(config.masking, "user-emails") == (False, (("email",),))
    assert rules_for(config.masking, "access-log") == (False, ())


def test_topic_patterns_glob_and_regex_match_the_whole_name():
    rules = with_console({"masking": [{"topic": "user-*", "fields": ["email"]},
                                      {"topic": "re:audit-[0-9]+", "value": True},
                                      {"topic": "exact.name", "fields": ["a.b", "email"]}]}).masking
    assert rules_for(rules, "user-emails") == (False, (("email",),))
    assert rules_for(rules, "users") == (False, ())                   # the glob needs the dash
    assert rules_for(rules, "audit-12") == (True, ())
    assert rules_for(rules, "audit-12x") == (False, ())               # regex is a full match, not a search
    assert rules_for(rules, "my-audit-12") == (False, ())
    assert rules_for(rules, "exactXname") == (False, ())              # a glob's "." is a dot
    assert rules_for(rules, "exact.name") == (False, (("a", "b"), ("email",)))


def test_rules_matching_one_topic_add_up():
    rules = with_console({"masking": [{"topic": "t*", "fields": ["a"]}, {"topic": "te*", "fields": ["b", "a"]},
                                      {"topic": "tes?", "value": True}]}).masking
    assert rules_for(rules, "tea") == (False, (("a",), ("b",)))
    assert rules_for(rules, "test") == (True, (("a",), ("b",)))


def test_json_fields_are_masked_where_their_paths_lead():
    value = json.dumps({"user_id": 7, "email": "ann@example.com", "profile": {"phone": "+1 555", "city": "Oslo"},
                        "contacts": [{"email": "bob@example.com"}, {"name": "x"}]}).encode()
    out = mask_value(value, False, (("email",), ("profile", "phone"), ("contacts", "email"), ("no", "such")))
    assert isinstance(out, bytes)
    assert json.loads(out) == {"user_id": 7, "email": MASK, "profile": {"phone": MASK, "city": "Oslo"},
                               "contacts": [{"email": MASK}, {"name": "x"}]}
    assert b"example.com" not in out
    # text in, text out; a whole-value rule; a tombstone stays a tombstone
    assert json.loads(mask_value('{"email": "é@x"}', False, (("email",),))) == {"email": MASK}  # type: ignore[arg-type]
    assert mask_value(value, True, ()) == MASK.encode()
    assert mask_value(None, True, ()) is None
    assert mask_value(value, False, ()) is value


@pytest.mark.parametrize("value", [b"ann@example.com", b'"ann@example.com"', b"\xff\xfe", b"{not json", b"42"])
def test_a_value_whose_fields_cannot_be_found_is_masked_whole(value):
    assert mask_value(value, False, (("email",),)) == MASK.encode()


@pytest.mark.parametrize("console, message", [
    ({"mask": []}, "unknown console key 'console.mask'; did you mean console.masking?"),
    ({"masking": {"topic": "a"}}, "console.masking: must be a list of rules"),
    ({"masking": ["user-emails"]}, "console.masking[0]: each rule must be a mapping"),
    ({"masking": [{"fields": ["email"]}]}, "console.masking[0].topic: missing"),
    ({"masking": [{"topic": "", "value": True}]}, "console.masking[0].topic = '': must be a topic name"),
    ({"masking": [{"topic": 3, "value": True}]}, "console.masking[0].topic = 3: must be a topic name"),
    ({"masking": [{"topic": "re:(", "value": True}]},
     "console.masking[0].topic = 're:(': not a valid regular expression"),
    ({"masking": [{"topic": "a", "value": True}, {"topic": "b"}]}, "console.masking[1]: masks nothing"),
    ({"masking": [{"topic": "a", "value": "yes"}]}, "console.masking[0].value = 'yes': must be true or false"),
    ({"masking": [{"topic": "a", "fields": []}]}, "console.masking[0].fields = []: must be a non-empty list"),
    ({"masking": [{"topic": "a", "fields": "email"}]}, "console.masking[0].fields = 'email': must be a non-empty"),
    ({"masking": [{"topic": "a", "fields": ["email", "a..b"]}]}, "console.masking[0].fields[1] = 'a..b': must be"),
    ({"masking": [{"topic": "a", "fields": ["x", 5]}]}, "console.masking[0].fields[1] = 5: must be"),
    ({"masking": [{"topic": "a", "fields": ["x"], "value": True}]},
     "console.masking[0]: has both 'value: true' and 'fields:'"),
    ({"masking": [{"topic": "a", "feilds": ["x"]}]}, "console.masking[0].feilds: unknown key"),
])
def test_bad_rules_are_refused_naming_the_key(console, message):
    with pytest.raises(ConfigError) as err:
        with_console(console)
    assert str(err.value).startswith(message), str(err.value)


def test_a_bad_rule_in_a_file_names_the_file_and_the_key(tmp_path):
    path = tmp_path / "storage.yaml"
    path.write_text("broker:\n  log.dirs: [logs]\nconsole:\n  masking:\n    - {topic: user-*, fields: [' ']}\n")
    with pytest.raises(ConfigError, match=r"storage\.yaml: console\.masking\[0\]\.fields\[0\] = ' '"):
        load_config(path)
