"""What the search and the evaluation share: fitness tasks, model loading, shared-prefix scoring, named factor
variants, statistics and the typed results table.

- :mod:`.tasks`: task classes that build scored samples (``build("kv_retrieval", num_pairs=20)``), registered by
  name; each class says what callers need to know of it (``position_sweep``, ``length_option``...);
- :mod:`.settings_parts`: the model and task parts of the search's and the evaluation's settings;
- :mod:`.loading`: one model/tokenizer loader, device and dtype rules;
- :mod:`.shared_prefix`: teacher-forced log-probabilities and accuracy with one forward pass per shared prefix;
- :mod:`.generation`: greedy decoding judged by the task's rule;
- :mod:`.variants`: ``base``, ``uniform:S``, ``adapter:DIR`` ... as models to compare;
- :mod:`.intervals`, :mod:`.paired`: intervals and paired differences; :mod:`.metrics`: the one metric table;
- :mod:`.results_table`: the typed "variants x gold positions" record that search and eval build and cards read.

Nothing here knows Optuna or the Hub; the modules load torch and transformers only where they need them.
"""
