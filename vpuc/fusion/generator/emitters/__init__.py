"""The ACT SHAVE emitters, one function per LIR expression kind (``target_machine.py``
collects them into its table): memory and LIR kinds, arithmetic, multi-step math,
comparisons / Select / Convert."""
