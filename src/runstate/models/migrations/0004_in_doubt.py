from tortoise import migrations
from tortoise.migrations import operations as ops
from runstate.basics.enums import StepStatus
from tortoise import fields

class Migration(migrations.Migration):
    dependencies = [('runstate', '0003_delta_events')]

    initial = False

    operations = [
        ops.AlterField(
            model_name='Step',
            name='status',
            field=fields.CharEnumField(description='PENDING: PENDING\nRUNNING: RUNNING\nSUCCESS: SUCCESS\nFAILED: FAILED\nSKIPPED: SKIPPED\nIN_DOUBT: IN_DOUBT', enum_type=StepStatus, max_length=16),
        ),
        ops.AlterField(
            model_name='StepVersion',
            name='status',
            field=fields.CharEnumField(description='PENDING: PENDING\nRUNNING: RUNNING\nSUCCESS: SUCCESS\nFAILED: FAILED\nSKIPPED: SKIPPED\nIN_DOUBT: IN_DOUBT', enum_type=StepStatus, max_length=16),
        ),
    ]
