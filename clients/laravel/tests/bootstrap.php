<?php
declare(strict_types=1);

// The test process boots the same app as its queue:work processes, to dispatch.
require __DIR__ . '/app/bootstrap/autoload.php';
