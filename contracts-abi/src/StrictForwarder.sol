// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/*
 * StrictForwarder — a test stand-in for the *configured* KeystoneForwarder 1.0.0: it refuses a report
 * the way the production forwarder does before anything reaches the receiver, so that a submitter's
 * pre-flight can be tested against forwarder reverts (which revert the whole transaction, unlike a
 * failing receiver):
 *   - InvalidReport() when rawReport is shorter than 109 bytes;
 *   - InvalidConfig(configId) when no config is set for configId = donId << 32 | donConfigVersion
 *     (read from rawReport[37:41] and rawReport[41:45]);
 *   - InvalidSignatureCount(f + 1, signatures.length) when the count is not f + 1.
 * It does NOT verify signatures (any bytes of the right count pass) and anyone may set a config:
 * never deploy it where a receiver trusting it would matter. A report that passes is routed like
 * TestForwarder does (receiver.onReport, ReportProcessed with the result).
 */

import {IReceiver} from "./interfaces/IReceiver.sol";

contract StrictForwarder {
    event ReportProcessed(
        address indexed receiver, bytes32 indexed workflowExecutionId, bytes2 indexed reportId, bool result
    );

    error InvalidReport();
    error InvalidConfig(uint64 configId);
    error InvalidSignatureCount(uint256 expected, uint256 received);

    /// configId => f + 1 (0: no config).
    mapping(uint64 configId => uint256) internal s_required;

    function setConfig(uint32 donId, uint32 configVersion, uint8 f) external {
        s_required[(uint64(donId) << 32) | configVersion] = uint256(f) + 1;
    }

    function report(address receiver, bytes calldata rawReport, bytes calldata, bytes[] calldata signatures)
        external
    {
        if (rawReport.length < 109) revert InvalidReport();
        uint64 configId = (uint64(uint32(bytes4(rawReport[37:41]))) << 32) | uint32(bytes4(rawReport[41:45]));
        uint256 required = s_required[configId];
        if (required == 0) revert InvalidConfig(configId);
        if (signatures.length != required) revert InvalidSignatureCount(required, signatures.length);
        bytes32 workflowExecutionId = bytes32(rawReport[1:33]);
        bytes2 reportId = bytes2(rawReport[107:109]);
        (bool ok,) = receiver.call(abi.encodeCall(IReceiver.onReport, (rawReport[45:109], rawReport[109:])));
        emit ReportProcessed(receiver, workflowExecutionId, reportId, ok);
    }
}
