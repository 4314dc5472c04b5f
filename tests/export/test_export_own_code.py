"""Remote code is trusted only when it is byte for byte the modeling code autocompress ships."""

import json
import shutil

from autocompress.modeling.register import DECILM_AUTO_MAP, DECILM_FILES, own_code, source_dir


def _folder(tmp_path, auto_map, files=DECILM_FILES):
    tmp_path.joinpath("config.json").write_text(json.dumps({"model_type": "nemotron-nas", "auto_map": auto_map}))
    for name in files:
        shutil.copy2(source_dir() / name, tmp_path / name)
    return tmp_path


def test_our_own_files_are_trusted(tmp_path):
    assert own_code(_folder(tmp_path, DECILM_AUTO_MAP))


def test_an_edited_file_is_not_trusted(tmp_path):
    folder = _folder(tmp_path, DECILM_AUTO_MAP)
    with open(folder / DECILM_FILES[1], "a") as f:
        f.write("\nimport os  # anything at all\n")
    assert not own_code(folder)


def test_a_missing_file_or_a_module_we_do_not_ship_is_not_trusted(tmp_path):
    (tmp_path / "a").mkdir()
    assert not own_code(_folder(tmp_path / "a", DECILM_AUTO_MAP, files=DECILM_FILES[:1]))
    (tmp_path / "b").mkdir()
    other = {"AutoConfig": "configuration_other.OtherConfig"}
    folder = _folder(tmp_path / "b", other)
    (folder / "configuration_other.py").write_text("class OtherConfig: pass\n")
    assert not own_code(folder)


def test_no_auto_map_or_no_config_needs_no_remote_code(tmp_path):
    assert not own_code(_folder(tmp_path, {}))
    (tmp_path / "empty").mkdir()
    assert not own_code(tmp_path / "empty")
