"""One module per stage family; each stage is a function (params, **arguments, context) ->
metrics, `context` the stage process's StageContext (gpt1.records) or None.

Each stage loads its inputs, calls the library, writes its outputs atomically and its record
(`<paths.metrics>/<stem>.json` + sidecar) through `recording.record`, and logs to MLflow. The
families: data (scan_mirror ... shard_corpus, prepare_task), pretrain, finetune (finetune,
ablation, transfer_layers, floor; the variants' params in variants.py), lr_pilot, curves
(curve_n, curve_floor, curve_step), zeroshot, import_hf (the stages under pretrain.import_hf)
and report; logged_models.py registers the stages' models in MLflow. gpt1/stage_table.py lists
every stage with its function; the CLI runs them by that table.
"""
