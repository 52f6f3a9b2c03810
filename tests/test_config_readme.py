"""config/README.md stays in step with the schema, and every schema key is described."""
from pathlib import Path

import yaml

from brownformer.config.readme import SCHEMA, render, undocumented

REPO = Path(__file__).resolve().parents[1]


def test_every_schema_key_has_a_description():
    schema = yaml.safe_load(SCHEMA.read_text())
    missing = undocumented(schema)
    assert not missing, f"schema keys without a description: {missing}"


def test_config_readme_is_generated_from_the_schema():
    committed = (REPO / "config" / "README.md").read_text()
    assert committed == render(), "regenerate: python -m brownformer.config.readme > config/README.md"
