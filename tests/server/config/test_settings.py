"""server/config/settings.py: debug settings renamed to DOCQA_DEBUG_* keep their old variables as
deprecated aliases, which the new name beats and the start-up log names."""

from __future__ import annotations

from server.config.settings import Settings, deprecated_aliases, deprecated_in


def test_renamed_settings_keep_their_old_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCQA_TEXT_RULES", "1")
    monkeypatch.setenv("DOCQA_CLUSTER_ROUTING", "any")
    s = Settings(data_dir=tmp_path)
    assert (s.debug_text_rules, s.debug_cluster_routing) == (1, "any")
    monkeypatch.setenv("DOCQA_DEBUG_TEXT_RULES", "2")  # the new name wins
    assert Settings(data_dir=tmp_path).debug_text_rules == 2
    assert Settings(data_dir=tmp_path, debug_text_rules=1).debug_text_rules == 1  # by field name, as tests do


def test_the_old_names_are_listed_and_warned_about():
    assert deprecated_aliases() == {
        "DOCQA_TEXT_RULES": "DOCQA_DEBUG_TEXT_RULES",
        "DOCQA_CLUSTER_ROUTING": "DOCQA_DEBUG_CLUSTER_ROUTING",
    }
    assert all(new.startswith("DOCQA_DEBUG_") for new in deprecated_aliases().values())
    assert deprecated_in({"DOCQA_N_CTX": "4096"}) == []
    old = deprecated_in({"docqa_text_rules": "1"})  # case-blind, as pydantic-settings reads variables
    assert old == ["DOCQA_TEXT_RULES is deprecated: set DOCQA_DEBUG_TEXT_RULES instead"]
    both = deprecated_in({"DOCQA_CLUSTER_ROUTING": "any", "DOCQA_DEBUG_CLUSTER_ROUTING": "document"})
    assert both == [
        "DOCQA_CLUSTER_ROUTING is deprecated: set DOCQA_DEBUG_CLUSTER_ROUTING instead "
        "(DOCQA_CLUSTER_ROUTING is ignored while DOCQA_DEBUG_CLUSTER_ROUTING is set)"
    ]
