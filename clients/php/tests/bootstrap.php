<?php
declare(strict_types=1);

require __DIR__ . '/../src/autoload.php';
require __DIR__ . '/../examples/GrantOrderPointsJob.php';
require __DIR__ . '/support/ScriptedBroker.php';
