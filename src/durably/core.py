"""The replay core under its older name: the kernel is now :mod:`durably.replay.kernel`
(with its operations, setup, scopes and park beside it in :mod:`durably.replay`); this
module keeps every name it had working (``durably.core.fault_step``,
``durably.core.StepInfo``, ``durably.core.SIGNAL_TIMEOUT_S_MAX``, ``RunCore``, ...).
"""

from __future__ import annotations

from .replay.gathers import GATHER_NAME as GATHER_NAME
from .replay.kernel import EVENTS_BUFFERED_MAX as EVENTS_BUFFERED_MAX
from .replay.kernel import HALT_NAMES as HALT_NAMES
from .replay.kernel import NOT_DONE as NOT_DONE
from .replay.kernel import SCOPE as SCOPE
from .replay.kernel import SIGNAL_TIMEOUT_S_MAX as SIGNAL_TIMEOUT_S_MAX
from .replay.kernel import TIMER_S_MAX as TIMER_S_MAX
from .replay.kernel import FaultHook as FaultHook
from .replay.kernel import FaultStepInfo as FaultStepInfo
from .replay.kernel import RunCore as RunCore
from .replay.kernel import RunSetup as RunSetup
from .replay.kernel import Scope as Scope
from .replay.kernel import StepInfo as StepInfo
from .replay.kernel import _pos_key as _pos_key
from .replay.kernel import cancelled_error as cancelled_error
from .replay.kernel import fault_step as fault_step
from .replay.kernel import type_name as type_name
from .replay.ops import Call as Call
from .replay.ops import Charge as Charge
from .replay.ops import Op as Op
from .replay.ops import Outcome as Outcome
from .replay.ops import ReadDecision as ReadDecision
from .replay.ops import ReadSpend as ReadSpend
from .replay.ops import SetBudget as SetBudget
from .replay.ops import TakeSignal as TakeSignal
from .replay.ops import Wait as Wait
from .replay.ops import Write as Write
