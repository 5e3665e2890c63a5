"""One module per stage family; each stage is a function (params, **arguments, context) ->
metrics, `context` the stage process's StageContext (gpt1.records) or None.

Each stage loads its inputs, calls the library, writes its outputs atomically and its record
(`<paths.metrics>/<stem>.json` + sidecar) through gpt1.recording, and logs to MLflow. The
families: data (scan_mirror ... shard_corpus, prepare_task), pretrain (pretrain,
pretrain_lstm, pretrain_dose), finetune (finetune, ablation, transfer_layers, floor), lr_pilot
(lr_pilot, lr_pilot_full, pilot_dose), curves (curve_n, curve_floor, curve_step, curve_dose),
zeroshot and report (under pretrain.import_hf, train_bpe and pretrain import the released
weights instead: gpt1/hf_stand_in.py); the fine-tuning ones run an arm (gpt1/arms/run.py)
on the params gpt1/arms composes. A stage module imports library modules, never another stage
module.
gpt1/stage_table.py lists every stage with its function; the CLI runs them by that table.
"""
