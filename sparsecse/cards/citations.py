"""The references a model card cites: SparseCSE, sentence-transformers and each method a run used
(:mod:`sparsecse.cards.model_card`), as BibTeX, by key; and which key each training objective cites."""

CITATIONS = {
    "sparsecse": ("SparseCSE", """@article{an2023sparse,
  title = {Sparse Contrastive Learning of Sentence Embeddings},
  author = {An, Ruize and Zhang, Chen and Song, Dawei},
  journal = {arXiv preprint arXiv:2311.03881},
  year = {2023}
}"""),
    "sentence-bert": ("Sentence-BERT (the sentence-transformers library)", """@inproceedings{reimers2019sentence,
  title = {Sentence-BERT: Sentence Embeddings using Siamese BERT-Networks},
  author = {Reimers, Nils and Gurevych, Iryna},
  booktitle = {Proceedings of EMNLP-IJCNLP},
  year = {2019}
}"""),
    "simcse": ("SimCSE", """@inproceedings{gao2021simcse,
  title = {SimCSE: Simple Contrastive Learning of Sentence Embeddings},
  author = {Gao, Tianyu and Yao, Xingcheng and Chen, Danqi},
  booktitle = {Proceedings of EMNLP},
  year = {2021}
}"""),
    "diffcse": ("DiffCSE", """@inproceedings{chuang2022diffcse,
  title = {DiffCSE: Difference-based Contrastive Learning for Sentence Embeddings},
  author = {Chuang, Yung-Sung and Dangovski, Rumen and Luo, Hongyin and Zhang, Yang and Chang, Shiyu and
            Solja{\\v{c}}i{\\'c}, Marin and Li, Shang-Wen and Yih, Wen-tau and Kim, Yoon and Glass, James},
  booktitle = {Proceedings of NAACL},
  year = {2022}
}"""),
    "infocse": ("InfoCSE", """@inproceedings{wu2022infocse,
  title = {InfoCSE: Information-aggregated Contrastive Learning of Sentence Embeddings},
  author = {Wu, Xing and Gao, Chaochen and Lin, Zijia and Han, Jizhong and Wang, Zhongyuan and Hu, Songlin},
  booktitle = {Findings of EMNLP},
  year = {2022}
}"""),
    "distillation": ("embedding distillation (sentence-transformers' MSE recipe)", """@inproceedings{reimers2020making,
  title = {Making Monolingual Sentence Embeddings Multilingual using Knowledge Distillation},
  author = {Reimers, Nils and Gurevych, Iryna},
  booktitle = {Proceedings of EMNLP},
  year = {2020}
}"""),
    "kprune": ("the reconstruction of the kept units (mask search and layer-wise refit)", """@inproceedings{kwon2022fast,
  title = {A Fast Post-Training Pruning Framework for Transformers},
  author = {Kwon, Woosuk and Kim, Sehoon and Mahoney, Michael W. and Hassoun, Joseph and Keutzer, Kurt and
            Gholami, Amir},
  booktitle = {Advances in Neural Information Processing Systems},
  year = {2022}
}"""),
    "halp": ("latency-aware pruning for a speed target (HALP)", """@inproceedings{shen2022structural,
  title = {Structural Pruning via Latency-Saliency Knapsack},
  author = {Shen, Maying and Yin, Hongxu and Molchanov, Pavlo and Mao, Lei and Liu, Jianna and Alvarez, Jose M.},
  booktitle = {Advances in Neural Information Processing Systems},
  year = {2022}
}"""),
    "nncf": ("int8 quantization with NNCF / OpenVINO", """@article{kozlov2020neural,
  title = {Neural Network Compression Framework for fast model inference},
  author = {Kozlov, Alexander and Lazarevich, Ivan and Shamporov, Vasily and Lyalyushkin, Nikolay and
            Gorbachev, Yury},
  journal = {arXiv preprint arXiv:2002.08679},
  year = {2020}
}"""),
    "senteval": ("SentEval (the transfer tasks' protocol)", """@inproceedings{conneau2018senteval,
  title = {SentEval: An Evaluation Toolkit for Universal Sentence Representations},
  author = {Conneau, Alexis and Kiela, Douwe},
  booktitle = {Proceedings of LREC},
  year = {2018}
}"""),
    "mteb": ("MTEB", """@inproceedings{muennighoff2023mteb,
  title = {MTEB: Massive Text Embedding Benchmark},
  author = {Muennighoff, Niklas and Tazi, Nouamane and Magne, Lo{\\"i}c and Reimers, Nils},
  booktitle = {Proceedings of EACL},
  year = {2023}
}"""),
}
OBJECTIVE_METHODS = {"simcse": "simcse", "diffcse": "diffcse", "infocse": "infocse", "distill": "distillation"}
